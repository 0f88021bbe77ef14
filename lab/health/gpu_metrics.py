"""A rank's GPU in Prometheus: memory from torch's allocator, health from NVML, read at scrape time.

Named after DCGM's fields (before dcgm-exporter 4.9 renamed them / from 4.9 on), in base
units, so a dashboard built on dcgm-exporter reads the same things:

    lab_gpu_memory_allocated_bytes   torch.cuda.memory_allocated (tensors alive)
    lab_gpu_memory_reserved_bytes    torch.cuda.memory_reserved (held by the caching allocator)
    lab_gpu_memory_total_bytes       DCGM_FI_DEV_FB_TOTAL (MiB) / DCGM_FI_DEV_FB_CAPACITY_BYTES
    lab_gpu_utilization_ratio        DCGM_FI_DEV_GPU_UTIL (percent) / DCGM_FI_DEV_GPU_UTIL_RATIO
    lab_gpu_temperature_celsius      DCGM_FI_DEV_GPU_TEMP / DCGM_FI_DEV_GPU_TEMP_CELSIUS
    lab_gpu_power_watts              DCGM_FI_DEV_POWER_USAGE / DCGM_FI_DEV_BOARD_POWER_WATTS
    lab_gpu_ecc_errors_total{kind}   DCGM_FI_DEV_ECC_SBE_VOL_TOTAL / _DBE_ (corrected / uncorrected)

dcgm-exporter's own series, where a cluster runs it, are read under either naming by the
torchrun-lab-dcgm rules in rules.yml.

The NVML figures need nvidia-ml-py (`import pynvml`); without it only the memory figures
are there. On a machine without CUDA the collector exports nothing at all: absent, not 0,
so no alert mistakes a CPU rank for an idle GPU. The data source is injected (tests use a
double; no GPU here).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


@dataclass
class GpuReading:
    allocated_bytes: float
    reserved_bytes: float
    total_bytes: float
    utilization_ratio: float | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    ecc_corrected: float | None = None
    ecc_uncorrected: float | None = None


class CudaSource:
    """This process's device: torch for memory, NVML (when installed) for the rest."""

    def __init__(self, device: int):
        import torch

        self.torch, self.device = torch, device
        self.nvml_handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            # NVML numbers GPUs as the machine does; torch as CUDA_VISIBLE_DEVICES does: match by PCI bus.
            bus = getattr(torch.cuda.get_device_properties(device), "pci_bus_id", None)
            self.nvml_handle = (
                pynvml.nvmlDeviceGetHandleByPciBusId(bus) if bus else pynvml.nvmlDeviceGetHandleByIndex(device)
            )
            self.pynvml = pynvml
        except Exception:  # noqa: BLE001 -- no NVML (package, driver or permission): memory figures only
            self.nvml_handle = None

    def read(self) -> GpuReading:
        cuda = self.torch.cuda
        reading = GpuReading(
            allocated_bytes=cuda.memory_allocated(self.device),
            reserved_bytes=cuda.memory_reserved(self.device),
            total_bytes=cuda.get_device_properties(self.device).total_memory,
        )
        if self.nvml_handle is not None:
            nvml, handle = self.pynvml, self.nvml_handle
            for field, call in (
                ("utilization_ratio", lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100),
                ("temperature_celsius", lambda: nvml.nvmlDeviceGetTemperature(handle, 0)),
                ("power_watts", lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000),
                ("ecc_corrected", lambda: nvml.nvmlDeviceGetTotalEccErrors(handle, 0, 0)),
                ("ecc_uncorrected", lambda: nvml.nvmlDeviceGetTotalEccErrors(handle, 1, 0)),
            ):
                try:
                    setattr(reading, field, float(call()))
                except Exception:  # noqa: BLE001 -- a field this GPU does not report (ECC off, say)
                    pass
        return reading


def local_source(local_rank: int) -> CudaSource | None:
    """The rank's GPU when this process uses CUDA (nccl sets the device to the local rank), else None."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return CudaSource(torch.cuda.current_device() if torch.cuda.is_initialized() else local_rank)


class GpuCollector:
    """Fresh families on every scrape from source.read(); nothing when there is no source."""

    def __init__(self, source, gpu: str):
        self.source, self.gpu = source, gpu

    def describe(self) -> list:
        return []  # families depend on the reading; collect() at registration time is not wanted

    def collect(self) -> Iterator:
        if self.source is None:
            return
        r = self.source.read()
        labels = ["gpu"]
        gauges = (
            ("lab_gpu_memory_allocated_bytes", "Bytes held by live tensors (torch's allocator).", r.allocated_bytes),
            ("lab_gpu_memory_reserved_bytes", "Bytes the caching allocator holds on the device.", r.reserved_bytes),
            ("lab_gpu_memory_total_bytes", "The device's memory (DCGM_FI_DEV_FB_TOTAL).", r.total_bytes),
            (
                "lab_gpu_utilization_ratio",
                "Busy fraction of the last sample period (DCGM_FI_DEV_GPU_UTIL/100).",
                r.utilization_ratio,
            ),
            ("lab_gpu_temperature_celsius", "GPU temperature (DCGM_FI_DEV_GPU_TEMP).", r.temperature_celsius),
            ("lab_gpu_power_watts", "Power draw (DCGM_FI_DEV_POWER_USAGE).", r.power_watts),
        )
        for name, doc, value in gauges:
            if value is not None:
                family = GaugeMetricFamily(name, doc, labels=labels)
                family.add_metric([self.gpu], value)
                yield family
        if r.ecc_corrected is not None or r.ecc_uncorrected is not None:
            ecc = CounterMetricFamily(
                "lab_gpu_ecc_errors",
                "ECC errors since the driver loaded (DCGM_FI_DEV_ECC_SBE/DBE_VOL_TOTAL).",
                labels=["gpu", "kind"],
            )
            for kind, value in (("corrected", r.ecc_corrected), ("uncorrected", r.ecc_uncorrected)):
                if value is not None:
                    ecc.add_metric([self.gpu, kind], value)
            yield ecc
