"""Stand-ins for what is not Gym: the scripted policy, the recorder, the cassette."""

#: A JSON object of script changes the scripted policy applies at start (the same keys as ``PUT /_script``).
#: Here, not in ``standins.policy``, so that what only reads it (a kept Gym's fingerprint) does not import a server.
SCRIPT_ENV = "PYTEST_GYM_POLICY_SCRIPT"
