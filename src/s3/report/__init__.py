"""s3.report: the report stage (`s3 report`): does a better dynamics model give a better policy?

It reads what the stages wrote (records/distill, records/train, records/eval, records/time_to_quality.json,
records/experiments, records/dagger) and writes records/report.json, reports/report.md and plots/report/; it runs no
simulator and no model. The floor above s3.evaluate: it may import evaluate, never the reverse.

    report.py   build_report / write_report / report: the stage, joining the steps below
    inputs.py   reading the stage metrics, the order of the policies
    rows.py     one row per policy: prediction accuracy, policy quality, transfer gap
    ranks.py    quality ranks of the families, Spearman rank correlation (exact p)
    claims.py   the paper's claims, each with its effect, interval, n and verdict
    stats.py    the verdict rule, seeds needed, correlation across models (on s3.evaluate.intervals)
    cost.py     efficiency: collection and direct PPO costs, speed-up, break-even
    levers.py   the ice levers' rows (the `ice` experiment set); dagger.py: the DAgger rounds' rows
    render.py   the tables and lines as text, rich tables, reports/report.md, the README block
    plots.py    the accuracy-vs-quality figure
    mlflow.py   the report's MLflow runs
"""
