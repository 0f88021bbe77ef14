"""GPU health in the rank exporter. No GPU here: the device source is a test double (as the
module allows: the source is injected); on this CPU machine the real detection must export
nothing at all."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from lab.health.gpu_metrics import GpuCollector, GpuReading, local_source
from lab.health.rank_exporter import RankMetrics


class FakeDevice:
    def __init__(self, reading: GpuReading):
        self.reading, self.reads = reading, 0

    def read(self) -> GpuReading:
        self.reads += 1
        return self.reading


def scrape(source) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(GpuCollector(source, gpu="1"))
    samples = {}
    for family in registry.collect():
        for s in family.samples:
            samples[s.name + ("{" + s.labels.get("kind", "") + "}" if "kind" in s.labels else "")] = s.value
            assert s.labels["gpu"] == "1"
    return samples


def test_each_scrape_reads_the_device_and_names_fields_as_dcgm_does():
    device = FakeDevice(
        GpuReading(
            allocated_bytes=3e9,
            reserved_bytes=4e9,
            total_bytes=141e9,
            utilization_ratio=0.9,
            temperature_celsius=61,
            power_watts=512.5,
            ecc_corrected=7,
            ecc_uncorrected=0,
        )
    )
    first = scrape(device)
    assert first == {
        "lab_gpu_memory_allocated_bytes": 3e9,
        "lab_gpu_memory_reserved_bytes": 4e9,
        "lab_gpu_memory_total_bytes": 141e9,
        "lab_gpu_utilization_ratio": 0.9,
        "lab_gpu_temperature_celsius": 61,
        "lab_gpu_power_watts": 512.5,
        "lab_gpu_ecc_errors_total{corrected}": 7,
        "lab_gpu_ecc_errors_total{uncorrected}": 0,
    }
    device.reading.ecc_uncorrected = 2
    assert scrape(device)["lab_gpu_ecc_errors_total{uncorrected}"] == 2 and device.reads == 2


def test_without_nvml_only_the_memory_figures_are_exported():
    names = set(scrape(FakeDevice(GpuReading(allocated_bytes=1, reserved_bytes=2, total_bytes=3))))
    assert names == {"lab_gpu_memory_allocated_bytes", "lab_gpu_memory_reserved_bytes", "lab_gpu_memory_total_bytes"}


def test_on_a_cpu_machine_the_gpu_metrics_are_absent_not_zero():
    assert local_source(0) is None
    exposition = generate_latest(RankMetrics(rank=0, local_rank=0, node="n", world_size=1, restart=0).registry)
    assert b"lab_gpu_" not in exposition
