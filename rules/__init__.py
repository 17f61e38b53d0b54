"""The rule base (installed as ``diagnoser.rules``)."""
