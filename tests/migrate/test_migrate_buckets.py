"""neuron-migrate: padding-bucket plans (graph count against padded tokens)."""
from neuron_migrate.buckets import optimal, plans, powers_of_two


def test_optimal_buckets_minimise_padding():
    lengths = [5, 6, 7, 30, 31, 100]
    assert optimal(lengths, 1) == [100]
    assert optimal(lengths, 2) == [31, 100]
    assert optimal(lengths, 3) == [7, 31, 100]
    assert optimal(lengths, 10) == sorted(set(lengths))
    assert powers_of_two([5, 8, 9]) == [8, 16]


def test_plans_count_graphs_and_padded_tokens():
    result = plans([(1, 5), (1, 7), (2, 5), (2, 7)])
    assert result["distinct_shapes"] == 4 and result["batch_sizes"] == [1, 2]
    one = next(p for p in result["plans"] if p["plan"].startswith("1 bucket"))
    assert one["buckets"] == [7] and one["graphs"] == 2
    assert one["padded_tokens"] == 1 * 2 + 2 * 2  # two prompts of 5 padded to 7, batch 1 and 2
    two = next(p for p in result["plans"] if p["plan"].startswith("2 buckets"))
    assert two["graphs"] == 4 and two["padded_tokens"] == 0
