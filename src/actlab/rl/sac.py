"""One SAC gradient update (critics, actor, temperature, Polyak targets) and its optimizer state."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from actlab.rl.agent import ACT_DIM, Agent


class SAC:
    """Optimizers of an :class:`Agent` and the update rule; ``state_dict`` holds everything a resume needs."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        cfg = agent.cfg
        critic_params = list(agent.critics.parameters())
        if agent.encoder is not None:
            critic_params += list(agent.encoder.parameters())  # the critic's loss trains the encoder
        self.critic_opt = torch.optim.Adam(critic_params, lr=cfg.sac.lr)
        self.actor_opt = torch.optim.Adam(agent.actor.parameters(), lr=cfg.sac.lr)
        self.alpha_opt = torch.optim.Adam([agent.log_alpha], lr=cfg.sac.lr)
        self.target_entropy = -cfg.sac.target_entropy_scale * ACT_DIM

    def update(self, b: dict[str, torch.Tensor], actor: bool = True) -> dict[str, torch.Tensor]:
        """One update from a batch of transitions (critics only when not ``actor``); returns 0-dim
        detached metrics (no host sync)."""
        ag, cfg = self.agent, self.agent.cfg
        alpha = ag.log_alpha.exp().detach()
        img, next_img = b.get("img"), b.get("next_img")
        with torch.no_grad():
            next_a, next_logp = ag.actor(ag.actor_input(b["next_vec"], next_img), generator=self.generator)
            next_a = ag.bounded(next_a)
            next_x = ag.critic_input(b["next_vec"], next_img, b.get("next_priv"), grad=False)
            target_q = ag.target_critics(next_x, next_a).min(0).values - alpha * next_logp  # (B,)
            y = b["reward"] + b["discount"] * target_q  # (B,)
        q = ag.critics(ag.critic_input(b["vec"], img, b.get("priv")), b["action"])  # (n, B)
        critic_loss = F.mse_loss(q, y.expand_as(q), reduction="none").mean(1).sum()
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()

        metrics = {"critic_loss": critic_loss.detach(), "q": q.detach().mean(), "alpha": alpha}
        if actor:
            metrics.update(self._actor_step(b, alpha))
        with torch.no_grad():
            for p, tp in zip(ag.critics.parameters(), ag.target_critics.parameters()):
                tp.lerp_(p, cfg.sac.tau)
        return metrics

    def _actor_step(self, b: dict[str, torch.Tensor], alpha: torch.Tensor) -> dict[str, torch.Tensor]:
        ag = self.agent
        img = b.get("img")
        a, logp = ag.actor(ag.actor_input(b["vec"], img), generator=self.generator)
        x = ag.critic_input(b["vec"], img, b.get("priv"), grad=False).detach()
        q_pi = ag.critics(x, ag.bounded(a)).min(0).values  # (B,)
        actor_loss = (alpha * logp - q_pi).mean()
        if ag.base is not None and ag.penalty > 0:
            # the residual's size (in units of its bound) costs: it stays small where the critics see no gain
            actor_loss = actor_loss + ag.penalty * a.pow(2).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()

        alpha_loss = -(ag.log_alpha * (logp.detach() + self.target_entropy)).mean()
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_opt.step()
        return {"actor_loss": actor_loss.detach(), "entropy": -logp.detach().mean()}

    generator: torch.Generator | None = None  # the run's generator (set by the trainer)

    def state_dict(self) -> dict[str, dict]:
        return {
            "critic_opt": self.critic_opt.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "alpha_opt": self.alpha_opt.state_dict(),
        }

    def load_state_dict(self, state: dict[str, dict]) -> None:
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])
