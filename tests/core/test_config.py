"""Every tunable is validated with an error that names it."""

import pytest

from wire_daemon.core.config import EmulationConfig, PredictionConfig, ReplayConfig, SteeringConfig
from wire_daemon.core.errors import ConfigError


@pytest.mark.parametrize(
    "config, key",
    [
        (ReplayConfig(prediction=PredictionConfig(learning_rate=0)), "prediction.learning_rate"),
        (ReplayConfig(prediction=PredictionConfig(running_only_estimate="mean")), "prediction.running_only_estimate"),
        (ReplayConfig(steering=SteeringConfig(charging_unit_s=-1)), "steering.charging_unit_s"),
        (ReplayConfig(steering=SteeringConfig(min_instances=5, max_instances=2)), "steering.min_instances"),
        (ReplayConfig(steering=SteeringConfig(packing="tight")), "steering.packing"),
        (ReplayConfig(steering=SteeringConfig(release_guard_s=-1)), "steering.release_guard_s"),
        (ReplayConfig(emulation=EmulationConfig(bandwidth_bytes_per_s=0)), "emulation.bandwidth_bytes_per_s"),
        (ReplayConfig(emulation=EmulationConfig(time_scale=0)), "emulation.time_scale"),
    ],
)
def test_bad_values_name_their_key(config, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        config.validate()


def test_defaults_are_the_papers():
    config = ReplayConfig().validate()
    assert config.prediction.learning_rate == 0.1
    assert config.steering.charging_unit_s == 3600
    assert config.steering.interval_s == 180
    assert config.steering.slots_per_instance == 4
    assert config.steering.max_instances == 12
    assert config.steering.release_restart_cost_fraction == 0.2
    assert config.steering.leftover_fraction == 0.2
    assert config.steering.boost_first_tasks == 5
