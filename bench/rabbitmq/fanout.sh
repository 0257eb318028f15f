#!/usr/bin/env bash
# Declares, on the RabbitMQ that setup.sh installed and started, the peer
# of a walbus topic with N subscriptions: the durable fanout exchange
# bench-fan and N durable quorum queues bench-fan-1 .. bench-fan-N bound to
# it, so each message sent to the exchange is stored in every queue. Run as
# root, after setup.sh:
#   bench/rabbitmq/fanout.sh [N]        (N defaults to 2)
#
# RabbitMQ 3.10's AMQP 1.0 plugin (address format "v1", deprecated from
# RabbitMQ 4.0 on) names the two ends so:
#   /exchange/X     a target: publish to exchange X, with the message's
#                   subject as routing key, which a fanout exchange ignores
#   /amq/queue/Q    a source: consume from queue Q, which must exist
#                   (/queue/Q would declare a classic queue of its own)
# RabbitMQ 4 spells them /exchanges/X and /queues/Q.
#
# The run, for N = 2 (the script prints the line for its N at the end):
#   walbus bench --url amqp://guest:guest@127.0.0.1:5673 \
#     --address /exchange/bench-fan \
#     --receive-addresses /amq/queue/bench-fan-1,/amq/queue/bench-fan-2
# and walbus's side of the comparison, a topic t with subscriptions s1 and
# s2 (from a Config.json) on walbus serve at 127.0.0.1:5672:
#   walbus bench --client amqp --topic t --subscriptions 2 \
#     --conn-string "Endpoint=sb://127.0.0.1;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true"
# --receivers R puts R receivers on each queue or subscription; "received"
# counts every copy.
#
# Queues bench-fan-K with K > N, left by an earlier run with a larger N,
# are deleted, and the N queues are purged: every copy a run measures is
# one it sent, and no queue it does not read from takes copies (and disk
# writes) behind its back.
set -euo pipefail

N=${1:-2}
EXCHANGE=${EXCHANGE:-bench-fan}
API=http://127.0.0.1:15672/api
case $N in
  '' | *[!0-9]* | 0) echo "usage: $0 [N], N a positive number of queues" >&2; exit 2 ;;
esac

api() { # METHOD PATH [JSON]
  curl -fsS -u guest:guest -X "$1" -H 'content-type: application/json' ${3:+-d "$3"} "$API$2"
}

rabbitmqctl -q await_startup

# Declaring again with the same arguments is a no-op.
api PUT "/exchanges/%2F/$EXCHANGE" '{"type":"fanout","durable":true,"auto_delete":false}'

# Earlier queues beyond N: their names are bench-fan-K, bound to the exchange.
rabbitmqctl -q list_bindings source_name destination_name destination_kind |
  while IFS=$'\t' read -r source dest kind; do
    [ "$source" = "$EXCHANGE" ] && [ "$kind" = queue ] || continue
    k=${dest#"$EXCHANGE"-}
    case $k in '' | *[!0-9]*) continue ;; esac
    if [ "$k" -gt "$N" ]; then
      echo "deleting $dest, beyond $N"
      api DELETE "/queues/%2F/$dest"
    fi
  done

addresses=()
for i in $(seq "$N"); do
  q=$EXCHANGE-$i
  api PUT "/queues/%2F/$q" '{"durable":true,"auto_delete":false,"arguments":{"x-queue-type":"quorum"}}'
  # A binding that exists already is not added twice.
  api POST "/bindings/%2F/e/$EXCHANGE/q/$q" '{"routing_key":"","arguments":{}}'
  api DELETE "/queues/%2F/$q/contents"
  addresses+=("/amq/queue/$q")
done

rabbitmqctl -q list_queues name type durable messages | grep -E "^$EXCHANGE-[0-9]+\b" | sort -V
echo
echo "walbus bench --url amqp://guest:guest@127.0.0.1:5673 --address /exchange/$EXCHANGE \\"
echo "  --receive-addresses $(IFS=,; echo "${addresses[*]}")"
