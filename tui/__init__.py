"""The Textual interface (installed as ``diagnoser.tui``); built on the same models and engine."""
