"""Where ``load_report`` used to live; ``bound --probe-report`` and the TUI still import it from here.

The probe report and its typed facts are models now (``diagnoser.models.probe_report`` and
``diagnoser.models.probe_results``), so they load with no torch and no probe code.
"""

from __future__ import annotations

from diagnoser.models.probe_report import load_report

__all__ = ["load_report"]
