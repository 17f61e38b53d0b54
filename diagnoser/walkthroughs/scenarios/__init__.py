"""The bundled walkthroughs: one YAML file each (`diagnoser walkthrough` lists them)."""
