"""The workq wire protocol as a sans-I/O codec: bytes in, typed events out, and back.

Nothing here touches a socket, a clock or the engine; the server and the client library
drive it. The server side: :class:`RequestParser` (bytes to requests) and the reply
encoders; the client side: each request's ``to_bytes()`` and :class:`ReplyParser`. The
package's modules each hold one part; import the names from here
(``from jobq.server import protocol as p``). ``docs/protocol.md`` describes the commands,
the limits, the codec's use and where jobq differs from workq-server.
"""

from jobq.server.protocol.errors import *  # noqa: F403
from jobq.server.protocol.log_lines import *  # noqa: F403
from jobq.server.protocol.parser import *  # noqa: F403
from jobq.server.protocol.registry import *  # noqa: F403
from jobq.server.protocol.replies import *  # noqa: F403
from jobq.server.protocol.reply_parser import *  # noqa: F403
from jobq.server.protocol.requests import *  # noqa: F403
from jobq.server.protocol.values import *  # noqa: F403
