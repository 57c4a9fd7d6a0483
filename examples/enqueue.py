"""The README's producer: enqueue, then wait for the result (a worker must run)."""

from app.tasks import send

job = send.enqueue("+1555", body="hi")                    # Job[str]
send.options(priority=10).enqueue("+1555", body="urgent") # higher priority runs first
send.enqueue_in(60, "+1555", body="later")                # delayed (Redis server clock)
print(job.wait(timeout=30).result)                        # sent 'hi' to +1555, or JobFailed
