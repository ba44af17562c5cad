"""A real SMTP submission server for the mail tests (aiosmtpd): STARTTLS required before
AUTH, one user and password, and every message received stored as <n>.eml beside a
<n>.json of its envelope. Prints "ready <port>" once it listens on 127.0.0.1.

usage: smtp_server.py PORT CERT KEY USER PASSWORD OUTDIR [implicit]
"""

import asyncio
import json
import logging
import os
import ssl
import sys

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword, SMTP


def main():
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    logging.getLogger("asyncio").setLevel(logging.WARNING)
    port, cert, key, user, password, outdir = sys.argv[1:7]
    implicit = len(sys.argv) > 7 and sys.argv[7] == "implicit"
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    count = {"n": 0}

    class Store:
        async def handle_DATA(self, server, session, envelope):
            count["n"] += 1
            base = os.path.join(outdir, str(count["n"]))
            with open(base + ".eml", "wb") as f:
                f.write(envelope.original_content or envelope.content)
            with open(base + ".json", "w") as f:
                json.dump(
                    {
                        "mail_from": envelope.mail_from,
                        "rcpt_tos": envelope.rcpt_tos,
                        "login": session.authenticated and user,
                    },
                    f,
                )
            return "250 OK stored"

    def authenticator(server, session, envelope, mechanism, auth_data):
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        ok = auth_data.login.decode() == user and auth_data.password.decode() == password
        return AuthResult(success=ok, handled=False)

    kwargs = dict(
        hostname="127.0.0.1",
        port=int(port),
        authenticator=authenticator,
        auth_required=True,
        auth_require_tls=True,
    )
    if implicit:
        # The whole connection is TLS; aiosmtpd only counts STARTTLS as TLS for AUTH.
        kwargs["ssl_context"] = context
        kwargs["auth_require_tls"] = False
    else:
        kwargs["tls_context"] = context
        kwargs["require_starttls"] = True
    controller = Controller(Store(), **kwargs)
    controller.start()
    print(f"ready {port}", flush=True)
    try:
        asyncio.get_event_loop().run_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
