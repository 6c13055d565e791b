"""The limit `srl bench` holds T to with the configured trainers (`srl.bench.trainer_limit`)."""

import pytest

from srl.bench import trainer_limit


def limit_t(rates):
    return 1 / (1 / rates["E"] + 1 / rates["I"] + 1 / rates["L"])


CARTPOLE = {"E": 360_000.0, "I": 2_200_000.0, "L": 170_000.0}


def test_single_thread_trainers_are_held_to_min_limit_t_and_their_share_of_l():
    limit, learner, cores = trainer_limit(CARTPOLE, cores=2, count=1, threads=1)
    assert (learner, cores) == (pytest.approx(85_000), 1) and limit == pytest.approx(min(limit_t(CARTPOLE), 85_000))
    assert limit < limit_t(CARTPOLE)  # one learner process on one of two cores: the learner is the bound
    for count in (2, 4):  # as many trainers as cores, or more: the learning spreads over all of them
        assert trainer_limit(CARTPOLE, cores=2, count=count, threads=1) == (
            pytest.approx(limit_t(CARTPOLE)), CARTPOLE["L"], 2)


# Pong on 2 quiet cores: two single-thread learner processes absorb 750 env steps/s (keeping both
# cores busy), one process of two threads 600.
PONG = {"E": 4_870.0, "I": 7_986.0, "L": 750.0, "Ul": 2.0, "Lc": 600.0}


def test_a_trainer_of_several_threads_is_held_to_its_measured_rate_and_the_cores_it_keeps_busy():
    # Were it to keep both cores busy while it learns, sampling would take turns with it ...
    limit, learner, cores = trainer_limit({**PONG, "Uc": 2.0}, cores=2, count=1, threads=2)
    assert (learner, cores) == (600.0, 2.0)
    assert limit == pytest.approx(1 / (1 / 600 + 1 / 4_870 + 1 / 7_986))  # about 500
    # ... but its threads keep 1.7 cores busy: samplers have the rest of the time.
    busy, _, cores = trainer_limit({**PONG, "Uc": 1.7}, cores=2, count=1, threads=2)
    assert cores == 1.7 and busy == pytest.approx(2 / (1.7 / 600 + 2 / 4_870 + 2 / 7_986)) and limit < busy < 600
    # Threads that added up as processes do (Lc = L, both cores busy) give back limit_T.
    as_processes, _, _ = trainer_limit({**PONG, "Lc": 750.0, "Uc": 2.0}, cores=2, count=1, threads=2)
    assert as_processes == pytest.approx(limit_t(PONG))
    # On 16 cores a trainer of 2 threads holds 2 of them: sampling has the other 14 beside it.
    wide = {"E": 40_000.0, "I": 64_000.0, "L": 6_000.0, "Ul": 16.0, "Lc": 600.0, "Uc": 2.0}
    assert trainer_limit(wide, cores=16, count=1, threads=2)[0] == pytest.approx(600.0)


def test_on_a_box_that_gives_one_core_of_two_the_trainer_takes_turns_with_sampling():
    # Under a one-core CPU quota L's two processes share one core's time (Ul = 1), and so does the
    # trainer of two threads (Uc = 1): learning and sampling take turns on that one core's worth.
    quota = {"E": 2_443.0, "I": 3_437.0, "L": 324.0, "Ul": 1.0, "Lc": 265.0, "Uc": 1.0}
    limit, _, _ = trainer_limit(quota, cores=2, count=1, threads=2)
    assert limit == pytest.approx(1 / (1 / 265 + 1 / 2_443 + 1 / 3_437))
    # Measured alone a trainer may learn faster per core than L's processes side by side did; the
    # configured trainers never beat learning spread over the whole box.
    fast = {**quota, "Lc": 500.0, "Uc": 0.9}
    assert trainer_limit(fast, cores=2, count=1, threads=2)[0] == pytest.approx(limit_t(fast))
