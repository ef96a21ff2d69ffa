"""s3 (Sim2Sim2Sim): distil a slow vehicle simulator into fast learned dynamics, train there, evaluate back."""

__version__ = "0.1.0"
