def test_burst_runs_jobs_in_priority_order(queue, burst, r, prefix, redis_url):
    q = queue("default")
    for i in range(3):
        q.enqueue("tests.jobs:record", redis_url, f"{prefix}:out", f"low{i}")
    q.enqueue("tests.jobs:record", redis_url, f"{prefix}:out", "high", priority=5)
    burst("default")
    assert r.lrange(f"{prefix}:out", 0, -1) == ["high", "low0", "low1", "low2"]
