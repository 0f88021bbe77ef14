"""Exporters whose every series says where it comes from: node, and for a rank, rank and local_rank.

Where a series comes from is the exporter's to say, not each scrape config's: a static
config (compose) cannot know which rank a port holds after a rendezvous, and a PodMonitor
only knows the pod. So every sample an exporter serves carries these labels, and every
scrape config the lab ships scrapes with honor_labels, keeping them as served.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric


class ConstantLabels:
    """A collector: the source registry's metrics, each sample with `labels` added."""

    def __init__(self, source: CollectorRegistry, labels: Mapping[str, str]):
        self.source, self.labels = source, dict(labels)

    def collect(self) -> Iterator[Metric]:
        for family in self.source.collect():
            labelled = Metric(family.name, family.documentation, family.type, family.unit)
            labelled.samples = [s._replace(labels={**self.labels, **s.labels}) for s in family.samples]
            yield labelled


def exposed(source: CollectorRegistry, labels: Mapping[str, str]) -> CollectorRegistry:
    """What an exporter serves: source, labelled."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ConstantLabels(source, labels))
    return registry
