"""Diagnose a running OpenAI-compatible server in one command: ``diagnoser live URL``.

    discover   what the server says about itself: model, context limit, version, configuration
    load       a bounded stream load, with /metrics scraped before, during and after it
    ablate     request-level switches the server's defaults turn on, measured both ways
    profile    /start_profile and /stop_profile around a short load, then the worker's trace
    case       every figure as a case fact that names its source, diagnosed like any case

Each stage reads the server over HTTP (and the profiler's folder on this host); none decides
anything: the case is the only thing handed to the rule engine.
"""
