"""What pytest-gym's own tests share, imported by name (never ``from conftest import``).

- ``paths``: the repository, test data, the bundled mcqa example.
- ``standin``: the one stand-in Gym over HTTP (``StandinGym``, its byte-level ``RawServer``).
- ``realgym``: finding the real Gym's CLI, a handle on a running deployment, attach/start arguments.
- ``fake_gym_cli``: a fake ``gym`` command (serving the stand-in) for start-mode and lifetime tests.
- ``processes``: finding every process a test run started; a test that holds a started Gym open.
- ``run_records``: trial outcomes and request bodies as the run-folder writer gets them.
- ``report_runs``: synthetic run folders for the report's tests.
- ``browser``: the report page's data, Chromium through Selenium.
- ``junit``: each test case's outcome in a JUnit file.
"""
