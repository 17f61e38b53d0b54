"""GPU and system probes (installed as ``diagnoser.probes``); they measure, never decide."""
