"""Whether a remote tracking server answers, asked once with a deadline before a run starts.

MLflow's own client retries an unreachable server with a growing back-off (seven tries, 120 s
each by default): start-up stalled for minutes with nothing printed, then ended in chained
tracebacks. One plain HTTP request with a timeout in seconds says the same in one line.
"""

from __future__ import annotations

import urllib.error
import urllib.request

# An MLflow REST endpoint every tracking server has; any HTTP answer (even 401 or 404) proves
# that something listens and answers, which is all this asks.
PROBE_PATH = "/api/2.0/mlflow/experiments/search?max_results=1"


def is_remote(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def unreachable_reason(uri: str, timeout: float) -> str | None:
    """None when the HTTP(S) server at `uri` answers within `timeout` seconds (connecting and
    answering each), else why not, in words."""
    try:
        with urllib.request.urlopen(uri.rstrip("/") + PROBE_PATH, timeout=timeout) as response:
            response.read(1)
    except urllib.error.HTTPError:
        return None  # it answered; a refusal (credentials, path) is MLflow's to report
    except urllib.error.URLError as err:
        if isinstance(err.reason, TimeoutError):
            return f"no answer within {timeout:g} s"
        return f"cannot connect ({err.reason})"
    except TimeoutError:  # connected, then no answer (socket.timeout is TimeoutError)
        return f"no answer within {timeout:g} s"
    except (OSError, ValueError) as err:  # a reset connection; a malformed URI
        return f"cannot connect ({err})"
    return None
