"""The agent's Prometheus metrics, read from NVML at scrape time (one read per scrape).

======================================================  ==========================================
``gpuworkspace_agent_gpu_process_memory_bytes``          GPU memory of the pod's processes (sum)
``gpuworkspace_agent_gpu_process_sm_utilization_percent``  SM utilisation of the pod's processes (sum)
``gpuworkspace_agent_gpu_processes``                     number of the pod's processes on the device
``gpuworkspace_agent_nvml_up``                           1 when NVML answered
======================================================  ==========================================

The per-device families carry ``node``, ``gpu`` (card index, or ``<card>/mig-<GPU_I_ID>``), ``uuid``
(the card's UUID, as dcgm-exporter's ``UUID`` label), ``mig_uuid`` (the MIG device's UUID, ``""`` for
a whole card) and ``pod_uid`` (``""`` for processes in no pod). A device without per-process
utilisation (MIG devices, older GPUs) has no utilisation series; a pod whose processes' memory NVML
does not know has no memory series.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .nvml import NvmlReader, aggregate

PREFIX = "gpuworkspace_agent_"
DEVICE_LABELS = ("node", "gpu", "uuid", "mig_uuid", "pod_uid")


class AgentCollector(Collector):
    """A custom collector: every ``collect()`` is one NVML read."""

    def __init__(self, reader: NvmlReader, node: str) -> None:
        self.reader = reader
        self.node = node

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(self._families())  # no read at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        reading = self.reader.read()
        memory, util, count, up = families = self._families()
        up.add_metric([self.node], 1.0 if reading.up else 0.0)
        pids = [p.pid for d in reading.devices for p in d.processes]
        pids += [pid for d in reading.devices for pid in d.sm_util or ()]
        for row in aggregate(reading, self.reader.pods_of(sorted(set(pids)))):
            labels = [self.node, row.gpu, row.uuid, row.mig_uuid, row.pod_uid]
            count.add_metric(labels, row.processes)
            if row.memory_bytes is not None:
                memory.add_metric(labels, row.memory_bytes)
            if row.sm_util_percent is not None:
                util.add_metric(labels, row.sm_util_percent)
        return iter(families)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                f"{PREFIX}gpu_process_memory_bytes",
                "GPU memory used by the pod's processes on the device (NVML usedGpuMemory, summed).",
                labels=DEVICE_LABELS,
            ),
            GaugeMetricFamily(
                f"{PREFIX}gpu_process_sm_utilization_percent",
                "SM utilisation of the pod's processes on the device (NVML smUtil, mean since the "
                "previous scrape, summed over the pod's processes).",
                labels=DEVICE_LABELS,
            ),
            GaugeMetricFamily(
                f"{PREFIX}gpu_processes",
                "Number of the pod's processes using the device.",
                labels=DEVICE_LABELS,
            ),
            GaugeMetricFamily(f"{PREFIX}nvml_up", "1 when NVML answered the last scrape.", labels=("node",)),
        )
