"""Every tunable is validated with an error that names it."""

import pytest

from wire_daemon.core.config import EmulationConfig, PredictionConfig, ReplayConfig, SteeringConfig
from wire_daemon.core.errors import ConfigError


@pytest.mark.parametrize(
    "make, key",
    [
        (lambda: ReplayConfig(prediction=PredictionConfig(learning_rate=0)), "prediction.learning_rate"),
        (lambda: PredictionConfig(running_only_estimate="mean"), "prediction.running_only_estimate"),
        (lambda: SteeringConfig(charging_unit_s=-1), "steering.charging_unit_s"),
        (lambda: SteeringConfig(min_instances=5, max_instances=2), "steering.min_instances"),
        (lambda: SteeringConfig(packing="tight"), "steering.packing"),
        (lambda: SteeringConfig(release_guard_s=-1), "steering.release_guard_s"),
        (lambda: EmulationConfig(bandwidth_bytes_per_s=0), "emulation.bandwidth_bytes_per_s"),
        (lambda: EmulationConfig(time_scale=0), "emulation.time_scale"),
    ],
)
def test_bad_values_name_their_key(make, key):
    """A section validates itself when it is built, in code as from a file."""
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        make()


def test_defaults_are_the_papers():
    config = ReplayConfig()
    assert config.prediction.learning_rate == 0.1
    assert config.steering.charging_unit_s == 3600
    assert config.steering.interval_s == 180
    assert config.steering.slots_per_instance == 4
    assert config.steering.max_instances == 12
    assert config.steering.release_restart_cost_fraction == 0.2
    assert config.steering.leftover_fraction == 0.2
    assert config.steering.boost_first_tasks == 5
