"""DAgger-style rounds: source-simulator rows where a trained policy drives (round.py), for re-distillation."""
