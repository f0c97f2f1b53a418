# The toolkit's stdout callback: Ansible's default output, except that a task polled by
# `until`/`retries` prints a progress line at a steady interval instead of `FAILED - RETRYING` at
# every poll. Chosen by ansible.cfg's stdout_callback = sm120.sglang.sglang_progress.
from __future__ import annotations

DOCUMENTATION = """
name: sglang_progress
type: stdout
short_description: Ansible's default output, with progress lines for the toolkit's long waits
description:
  - Prints what the C(ansible.builtin.default) callback prints, except for the retries of a task polled with
    C(until)/C(retries) (the build, the server's start, the benchmark) and the polls of an C(async) task.
  - A retry whose result carries C(progress) (what, phase, elapsed_s, timeout_s, last_log_line; the record of
    plugins/module_utils/sglang_sm120/progress.py that sglang_build and sglang_health return while they wait) prints
    one line - what runs, its phase, the time elapsed and left before its timeout, and its log's last line - at
    its first poll and then at most once every O(progress_interval) seconds, whatever the poll interval is.
  - A retry without C(progress) prints, at the same interval, that the task still waits (attempt, retries left,
    time since its first retry). A retry whose result failed (an C(until) that retries a failing module) is
    always printed, with the module's message.
  - None of these is printed as C(FAILED - RETRYING); a task that fails for good is shown as the default callback shows it.
    With -vv every printed line is followed by the poll's whole result.
extends_documentation_fragment:
  - default_callback
  - result_format_callback
options:
  progress_interval:
    description: Seconds between two progress lines of one wait (0 prints every poll).
    type: float
    default: 30
    env:
      - name: SGLANG_PROGRESS_INTERVAL
    ini:
      - section: callback_sglang_progress
        key: progress_interval
requirements:
  - set as stdout_callback in ansible.cfg (the toolkit's does)
"""

from ansible import constants as C  # noqa: E402
from ansible.plugins.callback.default import CallbackModule as DefaultCallback  # noqa: E402

from sglang_sm120.progress import Progress, Throttle, clock, progress_line, retry_line  # noqa: E402


class CallbackModule(DefaultCallback):
    """The default callback with throttled progress lines instead of FAILED - RETRYING."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "sglang_progress"

    def __init__(self) -> None:
        super().__init__()
        self._throttle = Throttle(30)

    def set_options(self, task_keys=None, var_options=None, direct=None) -> None:
        super().set_options(task_keys=task_keys, var_options=var_options, direct=direct)
        self._throttle = Throttle(float(self.get_option("progress_interval")))

    @staticmethod
    def _wait_key(result) -> tuple[str, str, str]:
        """One wait: a host, a task, and the loop item when the task loops (each item waits on its own)."""
        data = result.result
        return (result.host.get_name(), result.task._uuid, str(data.get("_ansible_item_label", data.get("item", ""))))

    def v2_runner_retry(self, result) -> None:
        data = result.result
        key = self._wait_key(result)
        host = self.host_label(result)
        task = result.task_name or str(result.task)
        attempts, retries = int(data.get("attempts") or 0), int(data.get("retries") or 0)
        if data.get("failed"):
            # `until` retrying a module that failed: a real failure, printed every time with its message.
            msg = f"RETRYING [{host}]: {task} after a failure ({max(0, retries - attempts)} retries left): {data.get('msg', '')}"
            color = C.COLOR_WARN
        elif not self._throttle.due(key):
            return
        else:
            progress = Progress.from_dict(data.get("progress"))
            if progress is not None:
                msg = progress_line(host, progress)
            else:
                msg = retry_line(host, task, attempts, retries, self._throttle.since_first(key))
            color = C.COLOR_DEBUG
        if self._run_is_verbose(result, verbosity=2):
            msg += f" Result was: {self._dump_results(data)}"
        self._display.display(msg, color=color)

    def v2_runner_on_async_poll(self, result) -> None:
        key = self._wait_key(result)
        if not self._throttle.due(key):
            return
        data = result.result
        progress = Progress.from_dict(data.get("progress"))
        if progress is not None:
            msg = progress_line(self.host_label(result), progress)
        else:
            msg = (
                f"WAITING [{self.host_label(result)}]: {result.task_name or result.task}: running in the background "
                f"(job {data.get('ansible_job_id')}), {clock(self._throttle.since_first(key))} since its first poll"
            )
        self._display.display(msg, color=C.COLOR_DEBUG)

    def v2_runner_on_ok(self, result) -> None:
        self._throttle.forget(self._wait_key(result))
        super().v2_runner_on_ok(result)

    def v2_runner_on_failed(self, result, ignore_errors: bool = False) -> None:
        self._throttle.forget(self._wait_key(result))
        super().v2_runner_on_failed(result, ignore_errors=ignore_errors)
