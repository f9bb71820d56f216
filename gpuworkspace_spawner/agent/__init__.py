"""``gpuworkspace-agent``: per-process GPU use on one node, by pod, as Prometheus metrics.

Optional DaemonSet (hostPID) for the attribution service: NVML says which processes use which GPU
and how much; ``/proc/<pid>/cgroup`` says which pod each process belongs to.
"""
