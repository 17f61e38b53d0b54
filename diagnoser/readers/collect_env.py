"""Platform facts from ``vllm collect-env`` (``python -m vllm.collect_env``) and PyTorch's
``python -m torch.utils.collect_env``, which it extends.

Labels are those of vllm/collect_env.py and torch/utils/collect_env.py: "PyTorch version",
"Is CUDA available", "GPU models and configuration", "vLLM Version", "GPU Topology"; older
releases print "label: value", newer ones pad the label into a column ("label   : value").
vLLM's version is read; torch, CUDA and driver versions have no field in the case and are not.
"""

from __future__ import annotations

import re

from diagnoser.artifacts.artifact import Artifact
from diagnoser.artifacts.formats import Format
from diagnoser.errors import InputError
from diagnoser.readers.facts import SourcedFacts
from diagnoser.readers.nvidia_smi import interconnect_facts, topology_links

_LABEL = re.compile(r"([A-Za-z][A-Za-z0-9 _/().-]*?)\s*:\s?(.*)")
_GPU_LINE = re.compile(r"GPU (\d+): (.+?)(?: \(UUID: .*\))?")
_NONE = {"", "N/A", "None", "Could not collect", "No CUDA"}


def _recognise(artifact: Artifact) -> bool:
    head = artifact.text[:8192]
    return "Collecting environment information" in head or ("PyTorch version" in head and "Is debug build" in head)


def _labels(artifact: Artifact) -> dict[str, tuple[str, int]]:
    """First value of each "label: value" line, with its line number."""
    found: dict[str, tuple[str, int]] = {}
    for number, line in enumerate(artifact.lines, 1):
        match = _LABEL.fullmatch(line.strip()) if not line.startswith((" ", "\t")) else None
        if match and match.group(1) not in found:
            found[match.group(1)] = (match.group(2).strip(), number)
    return found


def _device_api(labels: dict[str, tuple[str, int]]) -> tuple[str, int] | None:
    rocm = labels.get("ROCM used to build PyTorch")
    if rocm and rocm[0] not in _NONE:
        return "rocm", rocm[1]
    cuda = labels.get("Is CUDA available")
    if cuda and cuda[0] == "True":
        return "cuda", cuda[1]
    torch = labels.get("PyTorch version")
    if (cuda and cuda[0] == "False") or (torch and torch[0].endswith("+cpu")):
        return "cpu", (cuda or torch)[1]
    return None


def _first_gpu(artifact: Artifact, labels: dict[str, tuple[str, int]]) -> tuple[str, int] | None:
    """GPU 0's name: on the label's line ("GPU models and configuration: GPU 0: ...") or the next ones."""
    models = labels.get("GPU models and configuration")
    if models is None:
        return None
    value, number = models
    candidates = [(value, number)] + [(line.strip(), n) for n, line in enumerate(artifact.lines[number : number + 16], number + 1)]
    for text, line in candidates:
        match = _GPU_LINE.fullmatch(text)
        if match:
            return match.group(2), line
    return None


def _topology(artifact: Artifact, facts: SourcedFacts) -> None:
    """vLLM's "GPU Topology:" section is nvidia-smi topo -m, indented under the label."""
    start = next((n for n, line in enumerate(artifact.lines) if line.strip() == "GPU Topology:"), None)
    if start is None or start + 1 >= len(artifact.lines) or "GPU0" not in artifact.lines[start + 1]:
        return
    block = []
    for line in artifact.lines[start + 1 :]:
        if not line.strip():
            break
        block.append(line)
    links = topology_links(block, start + 2, artifact)
    facts.merge(interconnect_facts(links, f"{artifact.at(start + 1)} (GPU Topology, {len(links)} GPU pairs)"))


def read(artifact: Artifact) -> SourcedFacts:
    labels = _labels(artifact)
    if "PyTorch version" not in labels:
        raise InputError(f"{artifact.name}: a collect-env report without its PyTorch version line (cut short?)")
    facts = SourcedFacts()
    if "vLLM Version" in labels:
        version, line = labels["vLLM Version"]
        facts.add("observations.server.engine", "vllm", artifact.at(line))
        if version not in _NONE:
            facts.add("observations.server.engine_version", version.split()[0].removeprefix("v"), artifact.at(line))
    api = _device_api(labels)
    if api:
        facts.add("observations.platform.device_api", api[0], artifact.at(api[1]))
    if "OS" in labels and labels["OS"][0] not in _NONE:
        facts.add("observations.platform.os", labels["OS"][0], artifact.at(labels["OS"][1]))
    gpu = _first_gpu(artifact, labels)
    if gpu:
        facts.add("observations.probe.gpu_name", gpu[0], artifact.at(gpu[1]))
    _topology(artifact, facts)
    return facts


FORMAT = Format(
    name="collect-env",
    what="vllm collect-env or python -m torch.utils.collect_env output",
    recognise=_recognise,
    read=read,
)
