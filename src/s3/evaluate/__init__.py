"""s3.evaluate: drivers back in the SOURCE simulator on the held-out road course.

Every driver meets the same car there: `sim.driver_aids` (s3.sim.aids, traction control / ABS).

    params.py        EvaluateParams (the `evaluate:` section), PidParams
    drivers.py       Driver protocol, TrackState, PidDriver (pure pursuit + PID), PidFactory
    policy_driver.py PolicyDriver: an exported policy as a one-car client of s3.task's observation builder
    run.py           run_lap(sim, track, driver, ...) -> RunResult (one deterministic lap, judged by s3.task.rules)
    metrics.py       run_metrics (per run), aggregate / mean_ci (95 % Student-t over starts x seeds)
    evaluate.py      evaluate_driver(...) -> metrics/eval/<name>.json + plots; evaluate_baseline("pid"); each run an executor job
    policy_eval.py   evaluate_policy(...): evaluate_driver + the same starts in the policy's distilled env
                     (the transfer gap), and the model's manoeuvre probes
    probes.py        fixed open-loop manoeuvres in the source simulator and in a model, compared
    holdout.py       s3 holdout: policies and pid on held-out procedural tracks (heavy ice / dry), source
    report.py        s3 report: prediction accuracy vs policy quality, efficiency, report.json / report.md
    report_inputs.py the report's inputs: reading the stage metrics, the order of the policies
    report_rows.py   the report's row per policy: prediction accuracy, policy quality, transfer gap
    report_ranks.py  quality ranks of the families, Spearman rank correlation with prediction error
    report_cost.py   the efficiency accounting: distilled route vs direct, speed-up, break-even
    report_render.py the report as text: table rows, rich tables, reports/report.md
    report_mlflow.py the report's MLflow runs
    plots.py         trajectories on the track, speed/steering traces, top-down lap GIF
    tune_pid.py      the pid baseline's tuning aid, on procedural tracks only
"""
