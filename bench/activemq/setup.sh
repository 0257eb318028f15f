#!/usr/bin/env bash
# Installs ActiveMQ Classic from Debian 12's own repository (5.17.2, on the
# default JRE) and runs it as walbus's peer: an instance "bench" that speaks
# AMQP 1.0 only, on loopback only, keeps every persistent message in KahaDB
# and declares the queue bench-q and a topic with N subscriptions. Run as
# root:
#   AMQP_JARS=DIR [SUBSCRIPTIONS=N] bench/activemq/setup.sh
#   AMQP 1.0  127.0.0.1:5674  (5672 is walbus's, 5673 RabbitMQ's); no
#   OpenWire, no web console, no JMX. Anonymous SASL, no users.
#
# Debian builds the package without the AMQP module: activemq-amqp needs
# Qpid's proton-j, which Debian does not have (see the disabled modules in
# /usr/share/doc/libactivemq-java/README.Debian). Put the two jars of the
# same upstream release in a directory and name it in AMQP_JARS:
#   activemq-amqp-5.17.2.jar   (lib/ of apache-activemq-5.17.2-bin.tar.gz,
#                               or Maven Central)
#   proton-j-0.34.0.jar        (lib/optional/ of the same, or Maven Central)
# They are copied into the instance's own lib/, not into the package's.
# Without them this script installs and configures everything, then stops
# before starting the broker, which would refuse the amqp:// connector.
#
# Persistence, as a durable broker must: the bench sends every message
# durable, which ActiveMQ keeps as persistent; KahaDB fsyncs its journal
# before acknowledging a send (journalDiskSyncStrategy "always", the
# default). concurrentStoreAndDispatchQueues is turned off, so a message is
# stored before it is dispatched: by default a consumer fast enough to
# acknowledge first spares the store altogether, and a comparison of disk
# writes per message with walbus and RabbitMQ, which write every message,
# would not be like for like.
#
# Topics are virtual topics. A message sent to topic://VirtualTopic.T is
# stored in every queue named Consumer.<name>.VirtualTopic.T, each a
# subscription that any number of receivers share. The instance declares
# the N queues Consumer.s1.VirtualTopic.bench .. Consumer.sN.VirtualTopic.bench
# at start, so copies are kept even before a receiver attaches, as a
# Service Bus subscription keeps them. A durable topic subscription would
# not do: ActiveMQ 5 gives one (client ID, subscription name) one consumer
# at a time, so --receivers R > 1 could not share it, and go-amqp would
# need a container ID and link name per subscription, and a durable,
# never-expiring source, that no other broker here wants. Virtual topic
# queues are plain queues to go-amqp: walbus bench's --receive-addresses.
#
# Then, for the queue:
#   walbus bench --url amqp://127.0.0.1:5674 --address queue://bench-q
# and for the topic with N = 2 subscriptions (the script prints the line
# for its N at the end):
#   walbus bench --url amqp://127.0.0.1:5674 --address topic://VirtualTopic.bench \
#     --receive-addresses queue://Consumer.s1.VirtualTopic.bench,queue://Consumer.s2.VirtualTopic.bench
# --receivers R puts R receivers on each subscription queue; "received"
# counts every copy. Stop it with /etc/init.d/activemq stop (or systemctl
# stop activemq). Its log: /var/lib/activemq/bench/data/activemq.log.
set -euo pipefail

QUEUE=${QUEUE:-bench-q}
TOPIC=${TOPIC:-bench}
SUBSCRIPTIONS=${SUBSCRIPTIONS:-2}
INSTANCE=bench
PORT=5674
CONF=/etc/activemq/instances-available/$INSTANCE
BASE=/var/lib/activemq/$INSTANCE # the package's default ACTIVEMQ_BASE for an instance
case $SUBSCRIPTIONS in
  '' | *[!0-9]* | 0) echo "SUBSCRIPTIONS=$SUBSCRIPTIONS: want a positive number" >&2; exit 2 ;;
esac

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-upgrade activemq

# The instance: its configuration beside the package's example "main", its
# data and extra jars under its own base directory.
mkdir -p "$CONF" "$BASE/data" "$BASE/lib"
cp /etc/activemq/instances-available/main/log4j2.properties "$CONF/"

destinations="        <queue physicalName=\"$QUEUE\"/>"
for i in $(seq "$SUBSCRIPTIONS"); do
  destinations+=$'\n'"        <queue physicalName=\"Consumer.s$i.VirtualTopic.$TOPIC\"/>"
done
cat > "$CONF/activemq.xml" <<XML
<beans
  xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">

    <bean class="org.springframework.beans.factory.config.PropertyPlaceholderConfigurer"/>

    <!-- Written by walbus's bench/activemq/setup.sh: see its header. -->
    <broker xmlns="http://activemq.apache.org/schema/core"
            brokerName="$INSTANCE" useJmx="false" persistent="true"
            schedulerSupport="false" dataDirectory="\${activemq.base}/data">

        <!-- Virtual topics need no configuration: VirtualTopic.> fans out
             to the queues Consumer.*.VirtualTopic.> by default. -->
        <destinations>
$destinations
        </destinations>

        <persistenceAdapter>
            <kahaDB directory="\${activemq.base}/data/kahadb"
                    journalDiskSyncStrategy="always"
                    concurrentStoreAndDispatchQueues="false"/>
        </persistenceAdapter>

        <transportConnectors>
            <transportConnector name="amqp"
                uri="amqp://127.0.0.1:$PORT?maximumConnections=1000&amp;wireFormat.maxFrameSize=104857600"/>
        </transportConnectors>
    </broker>
</beans>
XML

# The AMQP module, into the instance's lib/, which the broker's class
# loader reads as it reads the package's.
jars_ok=true
for pattern in 'activemq-amqp-5.17.*.jar' 'proton-j-*.jar'; do
  jar=""
  if [ -n "${AMQP_JARS:-}" ]; then
    jar=$(find "$AMQP_JARS" -name "$pattern" | sort -V | tail -n 1)
  fi
  if [ -n "$jar" ]; then
    cp "$jar" "$BASE/lib/"
  elif ! compgen -G "$BASE/lib/$pattern" >/dev/null; then
    echo "no $pattern in ${AMQP_JARS:-AMQP_JARS (unset)} or $BASE/lib" >&2
    jars_ok=false
  fi
done
chown -R activemq:activemq "$BASE"
ln -sfn "$CONF" /etc/activemq/instances-enabled/$INSTANCE

if ! $jars_ok; then
  cat >&2 <<'MSG'
Debian's activemq has no AMQP module, and the broker would not start with an
amqp:// connector without it. The instance is configured; give the jars the
header of this script names in AMQP_JARS and run it again.
MSG
  exit 1
fi

# (Re)start it, so it reads this configuration: with systemd if it runs
# here, otherwise with the package's init script.
if [ -d /run/systemd/system ]; then
  systemctl restart activemq
else
  /etc/init.d/activemq restart # stops every instance, starts the enabled ones
fi
for _ in $(seq 90); do
  if (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null; then
    break
  fi
  sleep 1
done
if ! (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null; then
  echo "ActiveMQ does not listen on 127.0.0.1:$PORT; its log: $BASE/data/activemq.log" >&2
  exit 1
fi

addresses=()
for i in $(seq "$SUBSCRIPTIONS"); do
  addresses+=("queue://Consumer.s$i.VirtualTopic.$TOPIC")
done
echo "ActiveMQ $(dpkg-query -W -f '${Version}' activemq) listens on 127.0.0.1:$PORT"
echo "queue: walbus bench --url amqp://127.0.0.1:$PORT --address queue://$QUEUE"
echo "topic: walbus bench --url amqp://127.0.0.1:$PORT --address topic://VirtualTopic.$TOPIC \\"
echo "         --receive-addresses $(IFS=,; echo "${addresses[*]}")"
