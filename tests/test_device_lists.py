"""How many devices, and of how many kinds, a run's written device list names: the spread A/Bs read these."""

import pytest

from diagnoser.rules.comparison import device_count, device_kinds, more_devices, unlike_devices_added


@pytest.mark.parametrize(
    ("written", "count", "kinds"),
    [
        ("1x RTX 3090 + 2x RTX 3060", 3, {"rtx 3090", "rtx 3060"}),
        ("4 x H100", 4, {"h100"}),
        ("8xH100", 8, {"h100"}),
        ("2*A6000", 2, {"a6000"}),
        ("A100, A100", 2, {"a100"}),
        ("two GPUs", 2, {"gpus"}),
        ("2 A100s", 2, {"a100s"}),
        ("RTX 4090 and RTX 3060", 2, {"rtx 4090", "rtx 3060"}),
        # model numbers are not counts: no box holds 3090 devices
        ("3090 + 3060", 2, {"3090", "3060"}),
        ("4090 GPU", 1, {"4090 gpu"}),
        ("8", 8, {"8"}),
    ],
)
def test_a_written_device_list_is_counted_and_its_kinds_named(written, count, kinds):
    assert device_count(written) == count
    assert device_kinds(written) == kinds


def test_unlike_devices_added_needs_more_devices_of_more_than_one_kind():
    assert more_devices("1x RTX 3090 + 2x RTX 3060", "1x RTX 3090")
    assert unlike_devices_added("1x RTX 3090 + 2x RTX 3060", "1x RTX 3090")
    assert not unlike_devices_added("4x H100", "1x H100")
    assert not unlike_devices_added("RTX 3090", "RTX 3090 + RTX 3060")


def test_a_bare_count_of_the_pinned_unlike_devices_reads_as_their_list():
    from diagnoser.engine.comparison import named_devices
    from diagnoser.models.serving import Run

    runs = [Run(name="3090 only", baseline=True, settings={"devices": 1}, figures={"per_user_tokens_per_s": 30}),
            Run(name="both", settings={"devices": 2}, figures={"per_user_tokens_per_s": 20})]
    named = named_devices(runs, "NVIDIA GeForce RTX 3090 + NVIDIA GeForce RTX 4060")
    assert named[0].settings["devices"] == 1 and named[1].settings["devices"] == "NVIDIA GeForce RTX 3090 + NVIDIA GeForce RTX 4060"
    assert unlike_devices_added(str(named[1].settings["devices"]), "1")
    # alike devices, or a count that is not the machine's, keep the count: it says nothing of kinds
    assert named_devices(runs, "2x H100")[1].settings["devices"] == 2
    assert named_devices(runs, "RTX 3090 + 2x RTX 3060")[1].settings["devices"] == 2
    assert named_devices(runs, None) == runs
