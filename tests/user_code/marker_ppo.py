"""PPO that reports which team's rows it trained on (the first observation of `TeamsEnv` is a team marker)."""

from srl.algorithms.ppo import PPO
from srl.data import keys


class MarkerPPO(PPO):
    def step(self, batch):
        stats = super().step(batch)
        marker = batch[keys.OBS][keys.OBS][..., 0]
        stats.update(marker_min=float(marker.min()), marker_max=float(marker.max()),
                     rows=int(marker.shape[1]), obs_size=int(batch[keys.OBS][keys.OBS].shape[-1]))
        return stats
