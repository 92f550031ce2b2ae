# Creates a sandbox, runs a command in it, prints the output and deletes the sandbox.
#
#   export SANDBOX_API_KEY=sk_...                  # from the server's first start, or `sbx keys create`
#   export SANDBOX_API_URL=http://localhost:8080   # the default
#   python3 hello.py
import os
import sys

from sandboxd import Sandbox

image = os.environ.get("SANDBOX_IMAGE", "local/debian:bookworm")

with Sandbox.create(image=image, env={"NAME": "sandboxd"}, timeout_ms=120_000) as sandbox:
    print(f"created {sandbox.id} ({sandbox.name}) from {sandbox.image}")
    result = sandbox.exec('echo "Hello from $NAME!"')
    sys.stdout.write(result.stdout)
    print(f"exit code {result.exit_code}")
print(f"deleted {sandbox.id}")
