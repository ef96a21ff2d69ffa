"""s3.evaluate: drivers back in the SOURCE simulator on the held-out road course; runs and judges laps.

The report that reads its results is the floor above (s3.report); nothing here imports it.

Every driver meets the same car there: `sim.driver_aids` (s3.sim.aids, traction control / ABS).

    params.py        EvaluateParams (the `evaluate:` section), PidParams
    drivers.py       Driver protocol, TrackState, PidDriver (pure pursuit + PID), PidFactory
    policy_driver.py PolicyDriver: an exported policy as a one-car client of s3.task's observation builder
    run.py           run_lap(sim, track, driver, ...) -> RunResult (one deterministic lap, judged by s3.task.rules)
    metrics.py       run_metrics (per run); intervals over seeds: intervals.py
    evaluate.py      evaluate_driver(...) -> records/eval/<name>.json + plots; evaluate_baseline("pid");
                     each run an executor job
    policy_eval.py   evaluate_policy(...): evaluate_driver + the same starts in the policy's distilled env
                     (the transfer gap), and the model's manoeuvre probes
    suite.py         the evaluation suite's summaries: every metric per seed, with intervals over seeds
    intervals.py     those intervals: two-level bootstrap over seeds and runs, Wilson, a difference of two
    time_to_quality.py s3 time-to-quality: every kept checkpoint of each route on one fixed hold-out set
    ttq_checkpoints.py its hold-out set and the checkpoints' laps on it
    ttq_routes.py    its routes: curves on each route's time axis, the half-the-laps rule, the budget rule
    probes.py        fixed open-loop manoeuvres in the source simulator and in a model, compared
    holdout.py       s3 holdout: policies and pid on held-out procedural tracks (heavy ice / dry), source
    plots.py         trajectories on the track, speed/steering traces, top-down lap GIF
    tune_pid.py      the pid baseline's tuning aid, on procedural tracks only
"""
