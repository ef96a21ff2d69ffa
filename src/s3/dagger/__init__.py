"""DAgger-style rounds: source-simulator rows where a trained policy drives (round.py), for re-distillation."""

DAGGER = "dagger"  # the stage's name: dagger@<policy>, records/dagger/<policy>.json, an experiment result's key
