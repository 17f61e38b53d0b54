"""Hardware presets: datasheet figures and matching the names drivers report."""

from __future__ import annotations

import pytest

from diagnoser.models.hardware import hardware_preset, hardware_presets, match_hardware


@pytest.mark.parametrize(
    ("reported", "preset"),
    [
        # as torch.cuda.get_device_name / nvmlDeviceGetName / a trace's deviceProperties say them
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie"),
        ("NVIDIA B200", "b200"),
        ("AMD Instinct MI300X", "mi300x"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("RTX 3090", "rtx-3090"),
        ("NVIDIA GeForce RTX 3090 Ti", "rtx-3090-ti"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("RTX 4090", "rtx-4090"),
        ("NVIDIA GeForce RTX 5090", "rtx-5090"),
        ("NVIDIA RTX A6000", "rtx-a6000"),
        ("RTX A6000", "rtx-a6000"),
        ("NVIDIA L40", "l40"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA A10", "a10"),
        ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
        ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
        ("NVIDIA GB200", "gb200"),
        ("NVIDIA B300 SXM6 AC", "b300"),
        ("NVIDIA GB300", "gb300"),
        ("NVIDIA GB10", "gb10"),
        ("DGX Spark", "gb10"),
        ("AMD Instinct MI355X", "mi355x"),
        ("AMD Instinct MI325X", "mi325x"),
        ("AMD Radeon RX 7900 XTX", "rx-7900-xtx"),
        ("Apple M1", "apple-m1"),
        ("Apple M2 Ultra", "apple-m2-ultra"),
        ("Apple M4 Max 64GB", "apple-m4-max"),
        ("Apple M2 (MacBook Pro 16GB)", "apple-m2"),  # the tier is the word after the chip, not the laptop's name
        ("Apple M4 Pro (MacBook Pro, 24 GB unified memory)", "apple-m4-pro"),  # a comma in a remark lists nothing
        ("Apple M3 Pro", "apple-m3-pro"),
        # presets added from datasheets and spec pages: names as drivers report them and as users write them
        ("NVIDIA H20", "h20"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000-blackwell"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "rtx-pro-6000-blackwell-max-q"),
        ("NVIDIA GeForce RTX 4070", "rtx-4070"),
        ("NVIDIA GeForce RTX 4070 Ti", "rtx-4070-ti"),
        ("NVIDIA GeForce RTX 4080", "rtx-4080"),
        ("NVIDIA GeForce RTX 4080 SUPER", "rtx-4080-super"),
        ("RTX 3060 12GB", "rtx-3060-12gb"),
        ("NVIDIA GeForce RTX 3060 (12 GB)", "rtx-3060-12gb"),
        ("RTX 3060 8GB", "rtx-3060-8gb"),
        ("NVIDIA L20", "l20"),
        ("Tesla P40", "tesla-p40"),
        ("Apple M5", "apple-m5"),
        ("Apple M5 Pro", "apple-m5-pro"),
        ("Apple M5 Max", "apple-m5-max"),
        ("AMD Radeon RX 9070 XT", "rx-9070-xt"),
        ("Intel(R) Arc(TM) Pro B60 Graphics", "arc-pro-b60"),
        ("NVIDIA GeForce RTX 5060 Ti", "rtx-5060-ti"),  # the driver does not say which memory: bandwidth only
        ("NVIDIA GeForce RTX 5060 Ti 16GB", "rtx-5060-ti-16gb"),
        ("RTX 5060 Ti 8 GB", "rtx-5060-ti-8gb"),
        ("AMD Radeon RX 7900 XT", "rx-7900-xt"),
        ("NVIDIA H800", "h800-sxm"),
        ("NVIDIA A800-SXM4-80GB", "a800-sxm-80gb"),
        ("Tesla V100-PCIE-32GB", "v100-pcie-32gb"),
        ("Tesla V100-PCIE-16GB", "v100-pcie-16gb"),
        ("NVIDIA GeForce RTX 2080 Ti", "rtx-2080-ti"),
        ("NVIDIA GeForce RTX 5080", "rtx-5080"),
        ("NVIDIA GeForce RTX 5070 Ti", "rtx-5070-ti"),
        ("Jetson Orin Nano 8GB", "jetson-orin-nano-8gb"),
        ("Jetson Orin Nano Super 8GB", "jetson-orin-nano-super"),
        ("AMD Instinct MI100", "mi100"),
        ("AMD Instinct MI250X", "mi250x"),
        ("AMD Instinct MI250", "mi250"),
        ("AMD Instinct MI350X", "mi350x"),
        ("AMD Radeon 8060S Graphics", "radeon-8060s"),
        ("Intel Arc A770 16GB", "arc-a770-16gb"),
        ("Intel Arc A770 8GB", "arc-a770-8gb"),
        ("Intel(R) Arc(TM) B580 Graphics", "arc-b580"),
        ("RTX 3080 10GB", "rtx-3080-10gb"),
        ("NVIDIA GeForce RTX 3080 12GB", "rtx-3080-12gb"),
        ("NVIDIA RTX 4000 Ada Generation", "rtx-4000-ada"),
        ("NVIDIA RTX A5000", "rtx-a5000"),
        ("NVIDIA GH200 480GB", "gh200-96gb"),  # the first GH200: 96 GB HBM3 beside 480 GB LPDDR5X
        ("TPU v5 lite", "tpu-v5e"),  # as JAX's device_kind names them
        ("TPU v6 lite", "tpu-v6e"),
        ("TPU7x", "tpu-v7x"),
    ],
)
def test_reported_names_get_their_own_variant(reported, preset):
    assert match_hardware(reported) is hardware_presets()[preset]


# A variant on a different chip configuration, whose name holds every token of a preset's name: the preset's
# other_variants tokens ("d", "laptop") keep it from taking the full chip's figures.
_SUPERSET_VARIANTS = [
    "NVIDIA GeForce RTX 4090 D",  # 114 SMs, 425 W: ~11% less tensor throughput than the 4090
    "NVIDIA GeForce RTX 4090 Laptop GPU",  # AD103, 16 GB, 576 GB/s
    "NVIDIA GeForce RTX 5090 D",  # export variant, lower AI throughput
    "NVIDIA GeForce RTX 5090 Laptop GPU",  # GB203, 24 GB, 896 GB/s
]


@pytest.mark.parametrize(
    "reported",
    [
        None,
        "",
        "Some NPU",
        "NVIDIA A100-PCIE-40GB",
        "NVIDIA H100",
        # no preset: figures not verified from a datasheet or spec page
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "NVIDIA GH200 144G HBM3e",
        "NVIDIA A30",
        "AMD Radeon AI PRO R9700",
        "NVIDIA Jetson AGX Orin",  # 32 or 64 GB
        # names that leave open which of two boards with different figures it is
        "NVIDIA RTX PRO 6000 Blackwell",  # Workstation (600 W) or Max-Q (300 W)
        "NVIDIA GeForce RTX 3060",  # 12 GB at 360 GB/s or 8 GB at 240
        "NVIDIA GeForce RTX 3080",  # 10 GB at 760 GB/s or 12 GB at 912
        "Intel(R) Arc(TM) A770 Graphics",  # 16 GB at 560 GB/s or 8 GB at 512
        "AMD Instinct MI250X / MI250",  # ROCm's name for either
        # neighbours of a preset that are other chips or boards
        "NVIDIA A10G",
        "NVIDIA RTX 6000 Ada Generation",
        "AMD Radeon RX 7900 GRE",
        "Samsung 990 PRO M2",  # an M.2 drive, not an Apple chip: a bare M2 needs the vendor
        "Tesla V100S-PCIE-32GB",
        "NVIDIA GeForce RTX 4070 Ti SUPER",  # 16 GB, 672 GB/s
        "NVIDIA GeForce RTX 4070 SUPER",
        "NVIDIA GeForce RTX 3060 Ti",
        "NVIDIA GeForce RTX 3080 Ti",
        "NVIDIA GeForce RTX 5060",
        "NVIDIA GeForce RTX 5070",
        "AMD Radeon RX 9070",
        "NVIDIA H800 PCIe",
        "NVIDIA RTX 4000 SFF Ada Generation",  # 320 GB/s, 70 W
        "NVIDIA RTX 5000 Ada Generation",
        "TPU v5p",
        *_SUPERSET_VARIANTS,
    ],
)
def test_unknown_or_ambiguous_names_get_no_preset(reported):
    # a guess would put the wrong bandwidth under every bound (PCIe H100: 2.0 TB/s, SXM: 3.35)
    assert match_hardware(reported) is None


def test_variants_differ_where_the_datasheets_do():
    sxm, pcie, nvl = (hardware_preset(k) for k in ("h100-sxm", "h100-pcie", "h100-nvl"))
    assert (sxm.memory_bandwidth_gbs, pcie.memory_bandwidth_gbs, nvl.memory_bandwidth_gbs) == (3350, 2000, 3900)
    assert pcie.sm_count == 114 and pcie.peak_flops("bf16") == pytest.approx(756e12)
    assert hardware_preset("h200-nvl").peak_flops("fp8") < hardware_preset("h200").peak_flops("fp8")
    assert hardware_preset("a100-40gb").peak_flops("fp8") == hardware_preset("a100-40gb").peak_flops("bf16")  # no fp8 units


def test_every_preset_can_be_matched_by_a_name_of_its_own():
    for key, hw in hardware_presets().items():
        assert hw.device_names, key
        assert match_hardware(" ".join(hw.device_names[0])) is hw, key


# Presets of a bandwidth only: a unified-memory APU whose memory size and power the system sets, a board whose
# driver name does not say which memory it carries, and a module whose cut-down GPU's peaks are not published.
_BANDWIDTH_ONLY = ("radeon-8060s", "rtx-5060-ti", "jetson-agx-orin-32gb")


def test_every_listed_board_states_its_board_power():
    # Apple publishes bandwidth, not a memory size or a power limit per chip: those presets time bytes only; Google
    # publishes no per-chip power for its TPUs
    for key, hw in hardware_presets().items():
        assert (hw.board_power_w is not None) == (hw.listed and not key.startswith("tpu-")), key
        assert hw.listed or key.startswith("apple-") or key in _BANDWIDTH_ONLY, key


def test_later_presets_carry_the_datasheet_figures():
    # hand-checked against the datasheets and product pages named in each preset's source
    spark = hardware_preset("gb10")
    assert (spark.memory_bandwidth_gbs, spark.memory_gib, spark.board_power_w) == (273, 128, 140)
    assert spark.peak_tflops["nvfp4"] == 500  # 1 PFLOP FP4 with sparsity, halved
    xtx = hardware_preset("rx-7900-xtx")
    assert xtx.memory_bandwidth_gbs == 384 / 8 * 20 and xtx.peak_flops("bf16") == pytest.approx(122.8e12)
    gb200 = hardware_preset("gb200")
    assert gb200.memory_gib == pytest.approx(13.4e3 / 72, rel=0.01) and gb200.memory_bandwidth_gbs == 576e3 / 72
    assert hardware_preset("gb300").peak_flops("fp8") == pytest.approx(360e15 / 72)
    assert hardware_preset("b300").peak_flops("fp8") == hardware_preset("b200").peak_flops("fp8")  # same FP8 as B200
    mi355x = hardware_preset("mi355x")
    assert (mi355x.memory_bandwidth_gbs, mi355x.memory_gib, mi355x.board_power_w) == (8000, 288, 1400)
    assert mi355x.peak_flops("fp8") == pytest.approx(5e15)
    assert hardware_preset("mi325x").peak_flops("bf16") == hardware_preset("mi300x").peak_flops("bf16")  # same CDNA 3 compute
    assert [hardware_preset(f"apple-{c}").memory_bandwidth_gbs for c in ("m1", "m1-max", "m2-ultra", "m4-pro")] == [68.25, 400, 800, 273]


def test_new_presets_carry_the_datasheet_figures():
    # hand-checked against the whitepapers/datasheets named in each preset's source
    rtx3090 = hardware_preset("rtx-3090")
    assert (rtx3090.memory_bandwidth_gbs, rtx3090.board_power_w, rtx3090.sm_count) == (936, 350, 82)
    assert rtx3090.peak_flops("bf16") == pytest.approx(71e12)  # FP32 accumulate, not the 142 FP16-accumulate figure
    assert rtx3090.peak_flops("fp8") == rtx3090.peak_flops("bf16")  # Ampere: no fp8 units
    rtx4090 = hardware_preset("rtx-4090")
    assert (rtx4090.memory_bandwidth_gbs, rtx4090.board_power_w) == (1008, 450)
    assert rtx4090.peak_flops("bf16") == pytest.approx(165.2e12) and rtx4090.peak_flops("fp8") == pytest.approx(330.3e12)
    assert hardware_preset("rtx-5090").peak_flops("bf16") == pytest.approx(209.5e12)
    assert hardware_preset("rtx-3090-ti").memory_bandwidth_gbs == 1008
    l40, l40s = hardware_preset("l40"), hardware_preset("l40s")
    assert l40.memory_bandwidth_gbs == l40s.memory_bandwidth_gbs == 864
    assert (l40.board_power_w, l40s.board_power_w) == (300, 350)
    assert l40s.peak_flops("bf16") == pytest.approx(2 * l40.peak_flops("bf16"), rel=1e-3)
    l4 = hardware_preset("l4")
    assert (l4.memory_bandwidth_gbs, l4.board_power_w) == (300, 72) and l4.peak_flops("bf16") == pytest.approx(121e12)
    a10 = hardware_preset("a10")
    assert (a10.memory_bandwidth_gbs, a10.board_power_w) == (600, 150) and a10.peak_flops("bf16") == pytest.approx(125e12)
    a6000 = hardware_preset("rtx-a6000")
    assert (a6000.memory_gib, a6000.board_power_w) == (48, 300) and a6000.peak_flops("bf16") == pytest.approx(154.8e12)
    v32, v16 = hardware_preset("v100-sxm2-32gb"), hardware_preset("v100-sxm2-16gb")
    assert (v32.memory_gib, v16.memory_gib) == (32, 16)
    assert v32.memory_bandwidth_gbs == v16.memory_bandwidth_gbs == 900
    assert v32.peak_flops("bf16") == pytest.approx(125e12) and v32.interconnect_gbs == 150


def test_near_names_take_their_own_figures_not_a_neighbours():
    # the variants that differ from the name they contain get the figures of their own datasheets
    assert match_hardware("NVIDIA GeForce RTX 4070 Ti") is not hardware_preset("rtx-4070")
    assert hardware_preset("rtx-4070-ti").sm_count == 60 and hardware_preset("rtx-4070").sm_count == 46
    assert match_hardware("NVIDIA GeForce RTX 4080 SUPER").memory_bandwidth_gbs == 736
    assert match_hardware("NVIDIA GeForce RTX 4080").memory_bandwidth_gbs == 716.8
    assert match_hardware("RTX 3060 8GB").memory_bandwidth_gbs == 128 / 8 * 15  # not the 12 GB board's 192-bit bus
    assert match_hardware("RTX 3060 12GB").memory_bandwidth_gbs == 192 / 8 * 15
    maxq = match_hardware("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition")
    assert maxq.board_power_w == 300 and hardware_preset("rtx-pro-6000-blackwell").board_power_w == 600
    assert match_hardware("Jetson Orin Nano Super").memory_bandwidth_gbs == 102  # not the 68 GB/s default mode
    bare, sized = match_hardware("NVIDIA GeForce RTX 5060 Ti"), match_hardware("NVIDIA GeForce RTX 5060 Ti 16GB")
    assert bare.memory_bandwidth_gbs == sized.memory_bandwidth_gbs == 448
    assert (bare.memory_gib, sized.memory_gib, hardware_preset("rtx-5060-ti-8gb").memory_gib) == (None, 16, 8)
    assert not bare.listed and sized.listed


def test_added_presets_carry_the_datasheet_figures():
    # hand-checked against the datasheets, spec pages and documentation named in each preset's source
    h20 = hardware_preset("h20")
    assert (h20.memory_bandwidth_gbs, h20.memory_gib, h20.board_power_w) == (4000, 96, 400)
    assert h20.peak_flops("bf16") == pytest.approx(148e12) and h20.peak_flops("fp8") == pytest.approx(296e12)
    assert hardware_preset("rtx-4080").peak_flops("bf16") == pytest.approx(390e12 / 4)  # 390 sparse, FP16 accumulate
    assert hardware_preset("rtx-5080").peak_flops("fp8") == pytest.approx(1801e12 / 8, rel=1e-3)  # 1801 FP4 sparse
    assert hardware_preset("rtx-pro-6000-blackwell").peak_tflops["nvfp4"] == 4000 / 2
    assert hardware_preset("rx-9070-xt").peak_flops("int8") == pytest.approx(779e12 / 2, rel=1e-3)
    mi250x = hardware_preset("mi250x")  # one of the two GCDs the runtime shows per module
    assert mi250x.memory_gib == 128 / 2 and mi250x.peak_flops("bf16") == pytest.approx(383e12 / 2)
    assert hardware_preset("v100-pcie-32gb").memory_bandwidth_gbs == hardware_preset("v100-sxm2-32gb").memory_bandwidth_gbs
    assert hardware_preset("v100-pcie-32gb").peak_flops("bf16") < hardware_preset("v100-sxm2-32gb").peak_flops("bf16")
    assert hardware_preset("h800-sxm").peak_flops("fp8") == hardware_preset("h100-sxm").peak_flops("fp8")
    assert hardware_preset("h800-sxm").interconnect_gbs == 400 / 2  # NVLink cut from 900 to 400 GB/s both ways
    assert [hardware_preset(f"apple-{c}").memory_bandwidth_gbs for c in ("m5", "m5-pro", "m5-max")] == [153, 307, 614]
    v6e, v7x = hardware_preset("tpu-v6e"), hardware_preset("tpu-v7x")
    assert (v6e.peak_flops("bf16"), v6e.memory_bandwidth_gbs, v6e.memory_gib) == (918e12, 1638, 32)
    assert v7x.peak_flops("fp8") == pytest.approx(2 * v7x.peak_flops("bf16"), rel=1e-3)


def test_a_devices_sweep_is_its_memory_read_or_on_slow_half_precision_the_arithmetic():
    from diagnoser.engine.facts import sweep_ms

    # H100 SXM: 80 GiB over 3350 GB/s; its bf16 peak multiplies that much int4 in 0.34 ms, far under the read.
    assert sweep_ms(hardware_preset("h100-sxm")) == pytest.approx(80 * 2**30 / 3350e9 * 1e3)
    # Tesla P40: 24 GiB read in 74.5 ms, but fp16 at 0.18 TFLOPS multiplies the ~49.97e9 int4 weights it could hold
    # (two multiply-add FLOPs each, 0.515625 bytes a weight) in 555 ms.
    weights = 24 * 2**30 / 0.515625
    assert sweep_ms(hardware_preset("tesla-p40")) == pytest.approx(weights * 2 / 0.18e12 * 1e3)
    assert sweep_ms(hardware_preset("tesla-p40")) == pytest.approx(555.3, abs=0.1)
    assert sweep_ms(hardware_preset("apple-m4-max")) is None  # memory not fixed by the name


@pytest.mark.parametrize(
    ("written", "preset"),
    [
        ("AMD Ryzen AI Max+ 395 w/ Radeon 8060S", "radeon-8060s"),  # the "+" ends a word of the product's name
        ("Ryzen AI Max+ 395", "radeon-8060s"),
        ("NVIDIA GeForce RTX 4090+NVIDIA GeForce RTX 4090", "rtx-4090"),  # after a model number it lists two alike
        ("RTX 3090 + 2x RTX 3060", None),  # unlike devices are no one datasheet
        ("3090+3060", None),
    ],
)
def test_a_plus_in_a_name_against_a_plus_between_devices(written, preset):
    found = match_hardware(written)
    assert (found is None) if preset is None else (found == hardware_presets()[preset])


def test_jetson_agx_orin_modules_by_their_memory():
    big, small = match_hardware("NVIDIA Jetson AGX Orin 64GB"), match_hardware("Jetson AGX Orin 32GB")
    assert big is hardware_presets()["jetson-agx-orin-64gb"] and small is hardware_presets()["jetson-agx-orin-32gb"]
    assert big.memory_bandwidth_gbs == small.memory_bandwidth_gbs == 256 / 8 * 6400 / 1000  # 256-bit LPDDR5-6400
    assert big.peak_tflops["int8"] == 170 / 2 and not small.listed  # the GPU's sparse INT8 halved; the 32 GB's peaks unknown
