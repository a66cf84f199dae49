"""Run in lerobot's venv by test_lerobot_plugin_real.py: load an export through LeRobot's own path
(plugins registered as lerobot's scripts do, ``get_policy_class(type).from_pretrained``,
``make_pre_post_processors(pretrained_path=...)``) and write its actions for the given observations.

    python plugin_probe.py EXPORT_DIR OBS.safetensors OUT.safetensors

OBS holds ``obs/<i>/<key>`` (one observation each, images uint8 (C, H, W), state (D,)) and optionally
``prefix/<i>`` (d, A) committed actions; OUT gets ``chunk/<i>`` (H, A) and ``select/<i>`` (A,) (a
select_action sequence over the observations in order, after reset), ``rtc/<i>`` where a prefix was
given (the RTC call shape with inference_delay = d), and the parameter count. safetensors only.
"""

from __future__ import annotations

import sys

import torch
from lerobot.configs.policies import PreTrainedConfig
from lerobot.policies.factory import get_policy_class, make_pre_post_processors
from lerobot.utils.import_utils import register_third_party_plugins
from safetensors.torch import load_file, save_file


def main() -> int:
    export, obs_file, out_file = sys.argv[1:4]
    register_third_party_plugins()
    cfg = PreTrainedConfig.from_pretrained(export)
    policy = get_policy_class(cfg.type).from_pretrained(export, config=cfg)
    pre, post = make_pre_post_processors(cfg, pretrained_path=export)
    data = load_file(obs_file)
    n = 1 + max(int(k.split("/")[1]) for k in data if k.startswith("obs/"))
    out = {"n_parameters": torch.tensor([sum(p.numel() for p in policy.parameters())])}

    def batch(i: int) -> dict:
        obs = {}
        for k, v in data.items():
            if k.startswith(f"obs/{i}/"):
                key = k[len(f"obs/{i}/") :]
                obs[key] = v.float() / 255.0 if v.dtype == torch.uint8 else v.float()
        return pre(obs)  # as LeRobot's prepare_observation_for_inference makes them: images [0, 1]

    with torch.no_grad():
        for i in range(n):
            out[f"chunk/{i}"] = post(policy.predict_action_chunk(batch(i)))[0].contiguous()
            if f"prefix/{i}" in data:
                prefix = data[f"prefix/{i}"]
                padded = torch.cat([prefix, torch.zeros(10, prefix.shape[1])])  # LeRobot's zero padding
                rtc = policy.predict_action_chunk(
                    batch(i), inference_delay=prefix.shape[0], prev_chunk_left_over=padded
                )
                out[f"rtc/{i}"] = post(rtc)[0].contiguous()
        policy.reset()
        for i in range(n):
            out[f"select/{i}"] = post(policy.select_action(batch(i)))[0].contiguous()
    save_file(out, out_file)
    print(f"probe: {cfg.type} {type(policy).__name__} {n} observations", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
