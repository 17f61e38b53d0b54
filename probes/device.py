"""Device facts from NVML (read-only calls), matched to torch devices by UUID.

A bound is only as good as the clocks and bandwidth the card really runs at, so every field
the rule base may lean on is read here. A field NVML cannot give is recorded with the reason
(``missing``), never silently dropped, and a machine without a driver is a normal outcome:
the probe succeeds and says so. Nothing here sets clocks, power, compute mode or MIG.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from diagnoser.models.observations import ProbeFacts
from diagnoser.models.probe_results import DeviceFacts, GpuDevice, LiveReadings, NvLinkState, NvmlFacts
from diagnoser.probes.base import ProbeContext

NO_DRIVER = "no NVIDIA driver"

# Clock-event (throttle) reason bits as NVML documents them.
CLOCK_EVENT_BITS: dict[int, str] = {
    0x1: "GpuIdle",
    0x2: "ApplicationsClocksSetting",
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x10: "SyncBoost",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
    0x200: "BoardLimit",
    0x400: "Reliability",
}

def theoretical_bandwidth_gbs(bus_width_bits: int, max_mem_clock_mhz: float) -> float:
    """DRAM bandwidth from the bus width and memory clock; HBM and GDDR move data on both edges."""
    return bus_width_bits / 8 * max_mem_clock_mhz * 1e6 * 2 / 1e9


def decode_clock_events(mask: int) -> list[str]:
    names = [name for bit, name in CLOCK_EVENT_BITS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_BITS)
    return names + ([f"unknown(0x{unknown:x})"] if unknown else [])


def normalise_uuid(uuid: str) -> str:
    """NVML says 'GPU-<hex>' and torch says '<hex>'; compare them without prefix or case."""
    text = str(uuid).strip().lower()
    return text[4:] if text.startswith("gpu-") else text


def _error_name(nvml: Any, err: Exception) -> str:
    return type(err).__name__.removeprefix("NVMLError_") if isinstance(err, nvml.NVMLError) else type(err).__name__


def no_driver_reason(nvml: Any, err: Exception) -> str:
    if isinstance(err, (nvml.NVMLError_LibraryNotFound, nvml.NVMLError_DriverNotLoaded)):
        return f"{NO_DRIVER} ({err})"
    return f"NVML unavailable: {_error_name(nvml, err)}: {err}"


class _Reader:
    """Runs NVML queries, keeping the value or the reason it is missing."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.missing: dict[str, str] = {}

    def read(self, field: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except self.nvml.NVMLError as err:
            self.missing[field] = f"NVML {_error_name(self.nvml, err)}"
            return None


def _newer_or_older(nvml: Any, newer: str, older: str, *args: Any) -> Any:
    """Call the newer NVML entry point, or the older one where the binding (an older
    nvidia-ml-py) or the driver lacks it."""
    call = getattr(nvml, newer, None)
    if call is not None:
        try:
            return call(*args)
        except nvml.NVMLError_FunctionNotFound:
            pass
    return getattr(nvml, older)(*args)


def _clock_events(nvml: Any, handle: Any) -> int:
    return _newer_or_older(
        nvml, "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons", handle
    )


def _temperature(nvml: Any, handle: Any) -> int:
    return _newer_or_older(nvml, "nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU)


def _nvlink(nvml: Any, handle: Any, r: "_Reader") -> NvLinkState:
    """Active links; NotSupported or InvalidArgument mark the end of the links a board has.
    Any other error (a VM that hides the links, say) stops the count and is recorded."""
    active = checked = 0
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_InvalidArgument):
            break
        except nvml.NVMLError as err:
            r.missing["nvlink"] = f"NVML {_error_name(nvml, err)} at link {link}"
            break
        checked += 1
        active += int(state == nvml.NVML_FEATURE_ENABLED)
    return NvLinkState(active_links=active, links_checked=checked)


def live_readings(nvml: Any, handle: Any, r: "_Reader") -> dict[str, Any]:
    """The readings that change with load: clocks, clock-event reasons and power draw."""
    events = r.read("clock_event_reasons", lambda: _clock_events(nvml, handle))
    power = r.read("power_w", lambda: nvml.nvmlDeviceGetPowerUsage(handle))
    return {
        "sm_clock_mhz": r.read("sm_clock_mhz", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
        "mem_clock_mhz": r.read("mem_clock_mhz", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
        "clock_event_reasons": decode_clock_events(events) if events is not None else None,
        "power_w": power / 1000 if power is not None else None,
    }


def sample_live(nvml: Any, uuid: str) -> LiveReadings:
    """Live readings of one device, for sampling while a probe keeps it busy (idle clocks mislead)."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        return LiveReadings.unread({"all": no_driver_reason(nvml, err)})
    try:
        r = _Reader(nvml)
        prefixed = uuid if uuid.upper().startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
        handle = r.read("all", lambda: nvml.nvmlDeviceGetHandleByUUID(prefixed))
        if handle is None:
            return LiveReadings.unread(r.missing)
        return LiveReadings(**live_readings(nvml, handle, r), missing=r.missing)
    finally:
        nvml.nvmlShutdown()


def _device_facts(nvml: Any, index: int, torch_by_uuid: dict[str, dict[str, Any]]) -> GpuDevice:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    r = _Reader(nvml)
    mem = r.read("memory_total_bytes", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    bus = r.read("memory_bus_width_bits", lambda: nvml.nvmlDeviceGetMemoryBusWidth(handle))
    max_mem = r.read("max_mem_clock_mhz", lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM))
    limit = r.read("power_limit_w", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
    mig = r.read("mig_mode", lambda: nvml.nvmlDeviceGetMigMode(handle))
    uuid = r.read("uuid", lambda: nvml.nvmlDeviceGetUUID(handle))
    facts: dict[str, Any] = {
        "index": index,
        "name": r.read("name", lambda: nvml.nvmlDeviceGetName(handle)),
        "uuid": uuid,
        "memory_total_bytes": int(mem.total) if mem is not None else None,
        "memory_free_bytes": int(mem.free) if mem is not None else None,
        "memory_bus_width_bits": bus,
        "max_mem_clock_mhz": max_mem,
        "theoretical_bandwidth_gbs": theoretical_bandwidth_gbs(bus, max_mem) if bus and max_mem else None,
        "max_sm_clock_mhz": r.read("max_sm_clock_mhz", lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)),
        **live_readings(nvml, handle, r),
        "power_limit_w": limit / 1000 if limit is not None else None,
        "temperature_c": r.read("temperature_c", lambda: _temperature(nvml, handle)),
        "pcie_generation": r.read("pcie_generation", lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
        "pcie_width": r.read("pcie_width", lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
        "pcie_max_generation": r.read("pcie_max_generation", lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
        "nvlink": _nvlink(nvml, handle, r),
        "mig_enabled": bool(mig[0] == nvml.NVML_DEVICE_MIG_ENABLE) if mig is not None else None,
    }
    if facts["theoretical_bandwidth_gbs"] is None:
        r.missing["theoretical_bandwidth_gbs"] = "needs memory bus width and max memory clock"
    torch_dev = torch_by_uuid.get(normalise_uuid(uuid)) if uuid else None
    if torch_dev is None:
        r.missing["sm_count"] = "no torch CUDA device with this UUID (CUDA_VISIBLE_DEVICES or CPU-only torch)"
    return GpuDevice(
        **facts,
        torch_index=torch_dev["index"] if torch_dev else None,
        sm_count=torch_dev["sm_count"] if torch_dev else None,
        l2_cache_bytes=torch_dev["l2_cache_bytes"] if torch_dev else None,
        missing=r.missing,
    )


def _device_or_reason(nvml: Any, index: int, torch_by_uuid: dict[str, dict[str, Any]], r: _Reader) -> GpuDevice | None:
    """One device's facts, or None with the reason recorded (a GPU the container may not open)."""
    try:
        return _device_facts(nvml, index, torch_by_uuid)
    except nvml.NVMLError as err:
        r.missing[f"device {index}"] = f"NVML {_error_name(nvml, err)}"
        return None


def collect(nvml: Any, torch_devices: list[dict[str, Any]]) -> NvmlFacts:
    """All NVML facts; ``nvml`` is the pynvml module (a seam tests fill with recorded readings)."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        return NvmlFacts.unavailable(no_driver_reason(nvml, err))
    try:
        r = _Reader(nvml)
        count = r.read("device_count", nvml.nvmlDeviceGetCount)
        torch_by_uuid = {normalise_uuid(d["uuid"]): d for d in torch_devices}
        return NvmlFacts(
            nvml="ok",
            driver_version=r.read("driver_version", nvml.nvmlSystemGetDriverVersion),
            cuda_driver_version=_cuda_version(r.read("cuda_driver_version", nvml.nvmlSystemGetCudaDriverVersion)),
            device_count=count,
            devices=[d for i in range(count or 0) if (d := _device_or_reason(nvml, i, torch_by_uuid, r)) is not None],
            missing=r.missing,
        )
    finally:
        nvml.nvmlShutdown()


def _cuda_version(code: int | None) -> str | None:
    """NVML encodes CUDA 12.4 as 12040."""
    return None if code is None else f"{code // 1000}.{code % 1000 // 10}"


def torch_cuda_devices() -> list[dict[str, Any]]:
    import torch

    if not torch.cuda.is_available():
        return []
    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        devices.append(
            {
                "index": index,
                "uuid": str(props.uuid),
                "sm_count": props.multi_processor_count,
                "l2_cache_bytes": getattr(props, "L2_cache_size", None),
            }
        )
    return devices


def run(ctx: ProbeContext) -> DeviceFacts:
    import torch

    try:
        import pynvml
    except ImportError:
        nvml = NvmlFacts.unavailable("nvidia-ml-py is not installed")
    else:
        nvml = collect(pynvml, torch_cuda_devices())
    return DeviceFacts(**dict(nvml), torch_cuda=torch.version.cuda if torch.cuda.is_available() else "not available")


def to_observations(facts: DeviceFacts) -> dict[str, Any]:
    dev = facts.primary_device()
    if dev is None:
        return {}
    reasons = dev.clock_event_reasons
    return {
        "probe": ProbeFacts(
            # an unreadable reason mask is not "no throttling"
            **({"throttle_reasons": reasons} if reasons is not None else {}),
            gpu_name=dev.name,
            theoretical_bandwidth_gbs=dev.theoretical_bandwidth_gbs,
            sm_clock_mhz=dev.sm_clock_mhz,
            max_sm_clock_mhz=dev.max_sm_clock_mhz,
            mem_clock_mhz=dev.mem_clock_mhz,
            max_mem_clock_mhz=dev.max_mem_clock_mhz,
            power_w=dev.power_w,
            power_limit_w=dev.power_limit_w,
            temperature_c=dev.temperature_c,
            nvlink_active_links=dev.nvlink.active_links,
            pcie_generation=dev.pcie_generation,
        )
    }
