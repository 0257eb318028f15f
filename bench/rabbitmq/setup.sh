#!/usr/bin/env bash
# Installs RabbitMQ from Debian 12's own repository (3.10.8, Erlang/OTP 25),
# configures it for the walbus comparison and declares the durable quorum
# queue bench-q. Run as root. Loopback only:
#   AMQP 0-9-1 and AMQP 1.0  127.0.0.1:5673  (5672 is left to walbus)
#   management HTTP API      127.0.0.1:15672
# The guest/guest user works, as by default, from loopback only.
# Then, e.g.:
#   walbus bench --url amqp://guest:guest@127.0.0.1:5673 --address /amq/queue/bench-q
# For the peer of a walbus topic, a fanout exchange into N quorum queues,
# run fanout.sh beside this script next: its header has the command line.
# Stop it with: rabbitmqctl stop
set -euo pipefail

QUEUE=${QUEUE:-bench-q}

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-upgrade rabbitmq-server curl

# A fixed node name, so the CLI tools do not depend on the host name, and
# the Erlang port mapper (epmd) on loopback too.
cat > /etc/rabbitmq/rabbitmq-env.conf <<'CONF'
NODENAME=rabbit@localhost
export ERL_EPMD_ADDRESS=127.0.0.1
CONF
cat > /etc/rabbitmq/rabbitmq.conf <<'CONF'
listeners.tcp.1 = 127.0.0.1:5673
management.tcp.ip = 127.0.0.1
management.tcp.port = 15672
distribution.listener.interface = 127.0.0.1
CONF

# AMQP 1.0, and the HTTP API to declare the queue with.
rabbitmq-plugins enable --offline rabbitmq_amqp1_0 rabbitmq_management

# Start it: with systemd if it runs here, otherwise in the background (a
# node already running is left as it is: rabbitmqctl stop first to reconfigure).
if [ -d /run/systemd/system ]; then
  systemctl restart rabbitmq-server
elif ! rabbitmq-diagnostics -q ping >/dev/null 2>&1; then
  rabbitmq-server -detached
fi
# Wait for the Erlang node, then for RabbitMQ on it.
for _ in $(seq 60); do rabbitmq-diagnostics -q ping >/dev/null 2>&1 && break; sleep 1; done
rabbitmqctl -q await_startup

# The durable quorum queue; RabbitMQ 3's AMQP 1.0 address for it is
# /amq/queue/$QUEUE. Declaring it again with the same arguments is a no-op.
curl -fsS -u guest:guest -X PUT -H 'content-type: application/json' \
  -d '{"durable":true,"auto_delete":false,"arguments":{"x-queue-type":"quorum"}}' \
  "http://127.0.0.1:15672/api/queues/%2F/$QUEUE"

rabbitmqctl version
rabbitmqctl -q list_queues name type durable messages
