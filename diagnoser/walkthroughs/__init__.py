"""Scored walkthroughs: how engineers learn this diagnosis and how interviewers probe it.

A walkthrough is a YAML file (``Walkthrough``) of steps that ask for a number, a choice or an
ordering. Numbers are computed by the calculators from the step's inputs when the file
loads; wrong answers the step knows (traps) are computed the way the mistake computes them;
explanations carry the calculators' working and the rule engine's conclusions.
``WalkthroughRun`` is the UI-free driver a terminal, an answer file or a TUI screen feeds.
"""

from diagnoser.walkthroughs.model import Walkthrough
from diagnoser.walkthroughs.prepare import Prepared
from diagnoser.walkthroughs.result import StepView, Verdict, WalkthroughResult
from diagnoser.walkthroughs.run import WalkthroughRun
from diagnoser.walkthroughs.sheet import InterviewerSheet, interviewer_sheet
from diagnoser.walkthroughs.sources import find, load_catalogue

__all__ = [
    "InterviewerSheet",
    "Prepared",
    "StepView",
    "Verdict",
    "Walkthrough",
    "WalkthroughResult",
    "WalkthroughRun",
    "find",
    "interviewer_sheet",
    "load_catalogue",
]
