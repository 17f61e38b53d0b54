"""One screen per stage of the guided session, plus the dialogs they open."""
