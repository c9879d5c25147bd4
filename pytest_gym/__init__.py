"""pytest-gym: NeMo Gym evaluations as pytest test suites."""

__version__ = "0.1.0"
