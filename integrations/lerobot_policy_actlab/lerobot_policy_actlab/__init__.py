"""actlab's LeRobot plugin: policy types ``actlab_act`` / ``actlab_act_relative``, the simulated robot
``actlab_so101_sim`` and the environment ``actlab_so101`` (the sim's task suite, for lerobot-eval).

LeRobot's scripts import this package at start (``register_third_party_plugins``: every installed
distribution named ``lerobot_policy_*``); importing the configuration modules registers the types with
draccus. The model code is actlab's own (``actlab.policies``); this package holds adapters only.
"""

import sys

from actlab.errors import plain_refusals
from lerobot_policy_actlab.actlab_so101_sim import ActlabSO101Sim
from lerobot_policy_actlab.config_actlab_so101_env import ActlabSO101EnvConfig
from lerobot_policy_actlab.config_actlab_so101_sim import ActlabSO101SimConfig
from lerobot_policy_actlab.configuration_actlab import ActlabActConfig, ActlabActRelativeConfig

__all__ = [
    "ActlabActConfig",
    "ActlabActRelativeConfig",
    "ActlabSO101EnvConfig",
    "ActlabSO101Sim",
    "ActlabSO101SimConfig",
]


# An actlab refusal raised while a LeRobot script loads the policy (an edited export, an execution setting
# out of range) prints as actlab's one error, not under two tracebacks (actlab.errors.plain_refusals).
if not getattr(sys.excepthook, "actlab_refusals", False):
    sys.excepthook = plain_refusals(sys.excepthook)
