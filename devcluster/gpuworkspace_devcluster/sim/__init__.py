"""Simulated cluster components (scheduler, kubelet, CSI, CDI, KubeVirt, DCGM) over the API emulator."""
