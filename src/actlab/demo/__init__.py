"""``actlab demo``: the pipeline (record, train, evaluate: :mod:`actlab.demo.pipeline`) and its report
(:mod:`actlab.demo.report`), above every library package.

    from actlab.demo import DemoConfig, run_demo
    summary = run_demo(DemoConfig(out="runs/demo"))
"""

from actlab.demo.pipeline import DemoConfig, run_demo

__all__ = ["DemoConfig", "run_demo"]
