"""Helpers shared by the MADDPG test modules (not a test module): gradient steps on fixed rows, spies on the models'
inputs and gradients, hand computations, an env with action masks. The agent builder is :func:`helpers.make_maddpg`."""

from __future__ import annotations

import gymnasium
import torch
from helpers import make_maddpg_models, spread
from skrl.models.torch import CategoricalMixin, Model
from skrl.trainers.torch import SequentialTrainer
from skrl.utils.spaces.torch import flatten_tensorized_space

from skrl_marl_ext.trainers import mean_episode_return

NEVER = 10**9
"""``cfg.learning_starts`` of an agent that only fills its replay while driven (its gradient steps: :func:`step`)."""


def step(agent):
    """Run the agent's ``update`` (skrl's public entry point): ``cfg.gradient_steps`` (here 1) gradient steps of every
    agent on one batch of joint transitions each."""
    assert agent.cfg.gradient_steps == 1, "set gradient_steps=1 so that one update is one gradient step"
    agent.update(timestep=0, timesteps=1, uid=agent.possible_agents[0])


def fix_indexes(agent):
    """Make every gradient step of ``agent`` sample the same rows; return those rows' batch (public API only)."""
    indexes = agent.sample_indexes()
    agent.sample_indexes = lambda: indexes
    return agent.sample_batch(indexes)


def spy(model, key, *, roles=None):
    """Record ``inputs[key]`` of every call of ``model`` (of the given roles); returns the list it fills."""
    seen, compute = [], model.compute

    def recording(inputs, role=""):
        if roles is None or role in roles:
            seen.append(inputs[key])
        return compute(inputs, role)

    model.compute = recording
    return seen


def record_grads(parameters):
    """Record every gradient computed for each of ``parameters`` (hooks fire in backward, before any clipping)."""
    grads = [[] for _ in parameters]
    for i, p in enumerate(parameters):
        p.register_hook(lambda grad, i=i: grads[i].append(grad.detach().clone()))
    return grads


def record_role_grads(agent, role):
    """Record the gradients of every agent's ``role`` parameters in the backward passes that follow.

    :return: A function giving ``{uid: [[gradient of each backward pass] for each parameter]}``: a batched group's
        stacked ``(G, ...)`` gradients split by agent; a group sharing one model gives each agent the group's.
    """
    recorded = [(group, record_grads(group.parameters(role))) for group in agent.groups]

    def grads():
        return {
            uid: [[g[i] if group.batched else g for g in per_parameter] for per_parameter in per_group]
            for group, per_group in recorded
            for i, uid in enumerate(group.uids)
        }

    return grads


def train(env, agent, steps):
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": steps, "disable_progressbar": True}).train()


def evaluate(agent, num_agents, *, continuous, steps=100, num_envs=128):
    """Mean team return per episode of the greedy policies (the trainers' evaluation path)."""
    env = spread(num_envs=num_envs, num_agents=num_agents, continuous=continuous, seed=123)
    return mean_episode_return(agent, env, steps=steps)


def hand_critic_losses(models, batch, uids, *, target_action, keep_truncated, discount=0.9):
    """Each agent's critic loss worked out by hand from its models (QMLP: ``net(cat(states, joint action))``):
    ``y = r + discount (1 - d) Q'(s', a')`` with ``a'`` the joint ``target_action(uid, next observations)``, the mean
    of ``(Q(s, a) - y)^2`` over the rows kept (truncated rows only with ``keep_truncated``).

    :return: ``{uid: loss}`` and ``{uid: (Q'(s', a'), y)}``.
    """
    with torch.no_grad():
        next_joint = torch.cat([target_action(u, batch[u]["next_observations"]) for u in uids], dim=-1)
        joint = torch.cat([batch[u]["actions"] for u in uids], dim=-1)
        losses, targets = {}, {}
        for uid in uids:
            b = batch[uid]
            q_next = models[uid]["target_critic"].net(torch.cat([b["next_states"], next_joint], dim=-1))
            y = b["rewards"] + discount * (1.0 - b["terminated"].float()) * q_next
            q = models[uid]["critic"].net(torch.cat([b["states"], joint], dim=-1))
            keep = torch.ones_like(b["truncated"].view(-1)) if keep_truncated else ~b["truncated"].view(-1)
            losses[uid], targets[uid] = ((q - y) ** 2)[keep].mean(), (q_next, y)
    return losses, targets


def joint_part(agent, uid, joint):
    """Agent ``uid``'s one-hot columns of a joint action of Discrete agents."""
    start = sum(int(agent.action_spaces[u].n) for u in agent.possible_agents[: agent.possible_agents.index(uid)])
    return joint[..., start : start + int(agent.action_spaces[uid].n)]


class ConstantNoise:
    def __init__(self, value):
        self.value = value

    def sample(self, size):
        return torch.full(size, self.value)


class RandomMaskSpread:
    """The discrete spread env with dense random action masks that differ per env, per agent and per step.

    With ``dict_obs`` the mask is the ``"action_mask"`` entry of a Dict observation space (in the flattened
    observations, from the reset on); otherwise it is ``infos["action_mask"]`` of each step, and the masks of
    ``reset()`` (which skrl's trainers never hand to an agent) are all True. Every mask allows at least one action.
    ``step`` counts the actions taken against the masks of the observations they were taken on.
    """

    def __init__(self, num_envs=16, num_agents=2, *, dict_obs=False, seed=0):
        self.env = spread(num_envs=num_envs, num_agents=num_agents, continuous=False, seed=seed)
        self.dict_obs = dict_obs
        self.generator = torch.Generator().manual_seed(seed)
        self.num_envs, self.device = num_envs, self.env.device
        self.possible_agents = self.env.possible_agents
        self.action_spaces, self.state_spaces = self.env.action_spaces, self.env.state_spaces
        self.observation_spaces = self.env.observation_spaces
        if dict_obs:
            mask_space = gymnasium.spaces.Box(0, 1, (5,), dtype="int8")
            self.observation_spaces = {
                uid: gymnasium.spaces.Dict({"observation": space, "action_mask": mask_space})
                for uid, space in self.observation_spaces.items()
            }
        self.masks, self.history = None, []
        self.taken, self.violations, self.forbidden = 0, 0, 0

    def observation_space(self, uid):
        return self.observation_spaces[uid]

    def action_space(self, uid):
        return self.action_spaces[uid]

    def state_space(self, uid):
        return self.state_spaces[uid]

    def _draw(self):
        mask = torch.rand(self.num_envs, 5, generator=self.generator) < 0.4
        mask[torch.arange(self.num_envs), torch.randint(5, (self.num_envs,), generator=self.generator)] = True
        return mask

    def _with_masks(self, observations, infos, *, reset):
        all_true = reset and not self.dict_obs
        self.masks = {
            uid: torch.ones(self.num_envs, 5, dtype=torch.bool) if all_true else self._draw()
            for uid in self.possible_agents
        }
        self.history.append(self.masks)
        infos = {k: v for k, v in infos.items() if k != "action_mask"}
        if self.dict_obs:
            observations = {
                uid: flatten_tensorized_space({"observation": obs, "action_mask": self.masks[uid].float()})
                for uid, obs in observations.items()
            }
        else:
            infos["action_mask"] = self.masks
        return observations, infos

    def reset(self, *args, **kwargs):
        return self._with_masks(*self.env.reset(), reset=True)

    def step(self, actions):
        for uid in self.possible_agents:
            allowed = self.masks[uid].gather(1, actions[uid].long().view(-1, 1))
            self.taken += allowed.numel()
            self.violations += int((~allowed).sum())
            self.forbidden += int((~self.masks[uid]).sum())
        observations, rewards, terminated, truncated, infos = self.env.step(actions)
        observations, infos = self._with_masks(observations, infos, reset=False)
        return observations, rewards, terminated, truncated, infos

    def state(self):
        return self.env.state()

    def render(self, *args, **kwargs):
        return None

    def close(self):
        pass


class PlainCategorical(CategoricalMixin, Model):
    """A categorical policy of skrl's own mixin: it ignores action masks."""

    def __init__(self, observation_space, action_space):
        Model.__init__(self, observation_space=observation_space, action_space=action_space)
        CategoricalMixin.__init__(self)
        self.net = torch.nn.Linear(self.num_observations, self.num_actions)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"]), {}


def plain_policies(env):
    models = make_maddpg_models(env)
    for uid in env.possible_agents:
        for role in ("policy", "target_policy"):
            models[uid][role] = PlainCategorical(env.observation_space(uid), env.action_space(uid))
    return models


MASKED_CFG = {"batch_size": 32, "random_timesteps": 4, "learning_starts": 2}
