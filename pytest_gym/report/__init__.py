"""Reports a pytest-gym run leaves behind: a Gym-format run folder and suite-level JUnit data."""
