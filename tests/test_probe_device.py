"""Device probe: the real no-driver path here, and recorded H200 readings through the NVML seam."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py (the gpu extra) is not installed")

from diagnoser.models.probe_results import DeviceFacts, LiveReadings
from diagnoser.probes import device
from diagnoser.probes.base import ProbeContext
from diagnoser.probes.device import (
    collect,
    decode_clock_events,
    normalise_uuid,
    theoretical_bandwidth_gbs,
    to_observations,
)

UUID = "GPU-5a3e0c2d-11aa-4b2c-9d7e-0123456789ab"


def test_theoretical_bandwidth_hand_worked():
    # H100 SXM: 5120 bits / 8 = 640 B per edge, x 2 edges x 2619e6 Hz = 3,352.32 GB/s
    assert theoretical_bandwidth_gbs(5120, 2619) == pytest.approx(3352.32)
    # H200: 768 B x 2 x 3201e6 = 4,916.736 GB/s
    assert theoretical_bandwidth_gbs(6144, 3201) == pytest.approx(4916.736)


def test_clock_event_bits_decode():
    assert decode_clock_events(0) == []
    assert decode_clock_events(0x1 | 0x4) == ["GpuIdle", "SwPowerCap"]
    assert decode_clock_events(0x40 | 0x1000) == ["HwThermalSlowdown", "unknown(0x1000)"]


def test_uuid_normalisation_matches_nvml_and_torch_spellings():
    assert normalise_uuid(UUID) == normalise_uuid("5A3E0C2D-11AA-4B2C-9D7E-0123456789AB")


def test_no_driver_here_is_a_normal_result():
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    facts = device.run(ProbeContext())
    assert facts.nvml.startswith("no NVIDIA driver")
    assert facts.devices == [] and facts.driver_version is None
    assert set(facts.missing) == {"driver_version", "cuda_driver_version", "device_count"}
    assert all(reason.startswith("no NVIDIA driver") for reason in facts.missing.values())
    assert to_observations(facts) == {}


class RecordedNVML:
    """pynvml's surface, replaying readings recorded on an idle H200 (MIG unsupported, 18 NVLinks)."""

    def __init__(self, *, event_call_missing: bool = False, old_temperature_call: bool = False) -> None:
        self.event_call_missing = event_call_missing
        self.old_temperature_call = old_temperature_call
        self.shutdowns = 0

    def __getattr__(self, name):  # constants and error classes come from the real module
        return getattr(pynvml, name)

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self):
        return "570.86.15"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12080

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return SimpleNamespace(index=index)

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H200"

    def nvmlDeviceGetUUID(self, h):
        return UUID

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=150_754_820_096, free=150_000_000_000, used=754_820_096)

    def nvmlDeviceGetMemoryBusWidth(self, h):
        return 6144

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return {pynvml.NVML_CLOCK_SM: 1980, pynvml.NVML_CLOCK_MEM: 3201}[kind]

    def nvmlDeviceGetClockInfo(self, h, kind):
        return {pynvml.NVML_CLOCK_SM: 345, pynvml.NVML_CLOCK_MEM: 3201}[kind]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        if self.event_call_missing:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return 0x1

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return 0x1 | 0x4

    def nvmlDeviceGetPowerUsage(self, h):
        return 113_250

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetTemperatureV(self, h, sensor):
        if self.old_temperature_call:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 36

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= 18:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED if link != 7 else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetMigMode(self, h):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


TORCH_DEVICES = [{"index": 0, "uuid": UUID.removeprefix("GPU-").upper(), "sm_count": 132, "l2_cache_bytes": 62_914_560}]


def test_recorded_h200_readings_become_facts_with_reasons_for_gaps():
    nvml = RecordedNVML()
    facts = collect(nvml, TORCH_DEVICES)
    assert nvml.shutdowns == 1
    assert facts.nvml == "ok" and facts.driver_version == "570.86.15" and facts.cuda_driver_version == "12.8"
    (dev,) = facts.devices
    assert dev.name == "NVIDIA H200" and dev.torch_index == 0 and dev.sm_count == 132
    assert dev.theoretical_bandwidth_gbs == pytest.approx(4916.736)
    assert dev.sm_clock_mhz == 345 and dev.max_sm_clock_mhz == 1980
    assert dev.clock_event_reasons == ["GpuIdle"]
    assert dev.power_w == pytest.approx(113.25) and dev.power_limit_w == pytest.approx(700.0)
    assert (dev.nvlink.active_links, dev.nvlink.links_checked) == (17, 18)
    assert dev.pcie_generation == 5 and dev.pcie_width == 16
    assert dev.temperature_c is None and dev.missing["temperature_c"] == "NVML NotSupported"
    assert dev.mig_enabled is None and dev.missing["mig_mode"] == "NVML NotSupported"
    obs = to_observations(DeviceFacts(**dict(facts), torch_cuda="12.8"))["probe"]
    assert obs.gpu_name == "NVIDIA H200" and obs.nvlink_active_links == 17 and obs.throttle_reasons == ["GpuIdle"]
    assert obs.theoretical_bandwidth_gbs == pytest.approx(4916.736) and obs.temperature_c is None


def test_old_driver_falls_back_to_the_older_calls():
    (dev,) = collect(RecordedNVML(event_call_missing=True, old_temperature_call=True), TORCH_DEVICES).devices
    assert dev.clock_event_reasons == ["GpuIdle", "SwPowerCap"]
    assert dev.temperature_c == 36 and "temperature_c" not in dev.missing


def test_device_hidden_from_torch_is_not_matched():
    (dev,) = collect(RecordedNVML(), [{**TORCH_DEVICES[0], "uuid": "ffffffff-0000"}]).devices
    assert dev.torch_index is None and dev.sm_count is None and "UUID" in dev.missing["sm_count"]


def test_live_sample_by_uuid():
    class ByUUID(RecordedNVML):
        def nvmlDeviceGetHandleByUUID(self, uuid):
            assert uuid == UUID
            return SimpleNamespace(index=0)

    sample = device.sample_live(ByUUID(), UUID.removeprefix("GPU-"))
    assert sample.sm_clock_mhz == 345 and sample.power_w == pytest.approx(113.25)
    assert sample.clock_event_reasons == ["GpuIdle"] and sample.missing == {}


def test_live_sample_of_an_unknown_uuid_says_why():
    class NotFound(RecordedNVML):
        def nvmlDeviceGetHandleByUUID(self, uuid):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    assert device.sample_live(NotFound(), "ffff") == LiveReadings.unread({"all": "NVML NotFound"})


def test_older_binding_without_the_newer_calls_uses_the_older_ones():
    class OldBinding(RecordedNVML):  # an nvidia-ml-py that predates the versioned calls
        nvmlDeviceGetCurrentClocksEventReasons = None
        nvmlDeviceGetTemperatureV = None

    (dev,) = collect(OldBinding(), TORCH_DEVICES).devices
    assert dev.clock_event_reasons == ["GpuIdle", "SwPowerCap"] and dev.temperature_c == 36


def test_hidden_nvlinks_and_unopenable_devices_are_recorded_not_fatal():
    class Guarded(RecordedNVML):
        def nvmlDeviceGetCount(self):
            return 2

        def nvmlDeviceGetHandleByIndex(self, index):
            if index == 1:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
            return SimpleNamespace(index=index)

        def nvmlDeviceGetNvLinkState(self, h, link):
            if link == 2:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
            return pynvml.NVML_FEATURE_ENABLED

    facts = collect(Guarded(), TORCH_DEVICES)
    (dev,) = facts.devices
    assert (dev.nvlink.active_links, dev.nvlink.links_checked) == (2, 2)
    assert dev.missing["nvlink"] == "NVML Unknown at link 2"
    assert facts.missing["device 1"] == "NVML NoPermission"
