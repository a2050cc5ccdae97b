"""Parameter changes at run time: validated in the callback, applied after, a new planner
built and warmed off the callbacks.

`ParameterChanges` is a part of `PlannerNode` (a mixin: it uses the node's `_values`,
`config`, `_planner`, `_builder`, `_scheduler`, timers, reporter and logger). rclpy calls
`_validate_parameters` (the on-set callback: nothing slow, a change validates whole or is
rejected with the reason) and then `_apply_parameters` (the post-set callback): live values
apply to the next job; a `decode` group change hands the build to the node's
`PlannerBuilder` (`rebuild.py`), which swaps the new planner in once warm (`_rebuilt`) or
reports why it could not (`_rebuild_failed`: /diagnostics `rebuild_failures`, ERROR, and the
log). So `ros2 param set` answers at once: successful means accepted; the planner's part
applies when warm (docs/ros.md, "Parameters").
"""
from __future__ import annotations

from rcl_interfaces.msg import SetParametersResult

from wamdiff2_ros.node import params
from wamdiff2_ros.node.diagnostics import ERROR
from wamdiff2_ros.node.logs import clip


class ParameterChanges:
    """The set-parameters callbacks and the planner rebuilds of `PlannerNode`."""

    def _validate_parameters(self, changes: list) -> SetParametersResult:
        """Accept a change that validates (nothing slow here: a new planner is built and
        warmed after, off the callbacks; see `_apply_parameters`)."""
        values = dict(self._values)
        values.update({p.name: p.value for p in changes})
        try:
            cfg = params.node_config(values)
        except ValueError as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        changed = params.groups_changed(self._values, values)
        frozen = changed.get("load", []) + changed.get("io", [])
        state = self._state_machine.current_state[1]
        if frozen and state != "unconfigured":
            return SetParametersResult(successful=False, reason=(
                f"{', '.join(frozen)} can only change while the node is unconfigured (it is "
                f"{state}): deactivate and clean up, set it, then configure again"))
        self._staged = (values, cfg, changed)
        return SetParametersResult(successful=True)

    def _apply_parameters(self, changes: list) -> None:
        """Live values apply to the next job; a decode change builds the next planner on
        the builder's thread (the current one plans until the new one is warm)."""
        if self._staged is None:
            return
        values, cfg, changed = self._staged
        self._staged = None
        self._values, self.config = values, cfg
        self._diag_timer.timer_period_ns = int(cfg.diagnostics_period_s * 1e9)
        self._watchdog.timer_period_ns = int(self._watchdog_period(cfg) * 1e9)
        set_text = ", ".join(f"{p.name}={p.value!r}" for p in changes)
        if "decode" in changed and self._planner is not None:
            current = self._planner
            self._builder.request(lambda: current.reconfigure(cfg.planner_config),
                                  ", ".join(changed["decode"]))
            set_text += "; building and warming the planner for it (applied when warm)"
        self.get_logger().info("parameters set: " + set_text)

    def _plan_busy(self) -> bool:
        scheduler = self._scheduler
        return scheduler is not None and scheduler.plan_busy()

    def _rebuilt(self, planner, what: str) -> None:
        """The builder's planner is warm: later jobs get it."""
        if self._planner is None:                # cleaned up meanwhile: nothing to swap
            return
        self._planner = planner
        self.get_logger().info(f"{what}: new planner warm and in use; decoding with "
                               f"{planner.decode_summary()}")

    def _rebuild_failed(self, what: str, exc: BaseException) -> None:
        planner = self._planner
        keeping = planner.decode_summary() if planner is not None else "no planner"
        self._reporter.problem(ERROR, "rebuild_failures", (
            f"{what}: the planner could not be rebuilt ({type(exc).__name__}: "
            f"{clip(str(exc), 200)}); keeping {keeping}"))

    def wait_rebuilt(self, timeout: float = 300.0) -> bool:
        """Until no planner rebuild is pending (tests, tools); True if none within
        `timeout`."""
        return self._builder.idle(timeout)
