"""The limit `srl bench` holds T to with the configured trainers (`srl.bench.trainer_limit`)."""

import pytest

from srl.bench import trainer_limit

CARTPOLE = {"E": 360_000.0, "I": 2_200_000.0, "L": 170_000.0}
LIMIT_T = 1 / (1 / CARTPOLE["E"] + 1 / CARTPOLE["I"] + 1 / CARTPOLE["L"])


def test_single_thread_trainers_are_held_to_min_limit_t_and_their_share_of_l():
    limit, learner, cores = trainer_limit(CARTPOLE, cores=2, count=1, threads=1)
    assert (learner, cores) == (pytest.approx(85_000), 1) and limit == pytest.approx(min(LIMIT_T, 85_000))
    assert limit < LIMIT_T  # one learner process on one of two cores: the learner is the bound
    for count in (2, 4):  # as many trainers as cores, or more: the learning spreads over all of them
        assert trainer_limit(CARTPOLE, cores=2, count=count, threads=1) == (pytest.approx(LIMIT_T), CARTPOLE["L"], 2)


def test_a_trainer_of_several_threads_is_held_to_its_measured_rate_on_the_cores_it_holds():
    # Pong on 2 cores: two single-thread learner processes absorb 750 env steps/s, one process of
    # two threads 600. Were it to keep both cores busy while it learns, sampling would take
    # turns with it ...
    pong = {"E": 4_870.0, "I": 7_986.0, "L": 750.0, "Lc": 600.0, "Uc": 2.0}
    limit, learner, cores = trainer_limit(pong, cores=2, count=1, threads=2)
    assert (learner, cores) == (600.0, 2.0)
    assert limit == pytest.approx(1 / (1 / 600 + 1 / 4_870 + 1 / 7_986))  # about 500
    # ... but its threads keep 1.7 cores busy: the rest of the time samplers have.
    busy, _, cores = trainer_limit({**pong, "Uc": 1.7}, cores=2, count=1, threads=2)
    assert cores == 1.7 and busy == pytest.approx(2 / (1.7 / 600 + 2 / 4_870 + 2 / 7_986)) and limit < busy < 600
    # Threads that added up as processes do (Lc = L, both cores busy) would give back limit_T.
    as_processes, _, _ = trainer_limit({**pong, "Lc": 750.0}, cores=2, count=1, threads=2)
    assert as_processes == pytest.approx(1 / (1 / 750 + 1 / 4_870 + 1 / 7_986))
    # On 16 cores a trainer of 2 threads holds 2 of them: sampling has the other 14 beside it.
    wide, _, _ = trainer_limit({"E": 40_000.0, "I": 64_000.0, "L": 6_000.0, "Lc": 600.0, "Uc": 2.0},
                               cores=16, count=1, threads=2)
    assert wide == pytest.approx(600.0)
