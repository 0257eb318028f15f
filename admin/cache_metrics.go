package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbus/walbus/broker"
)

var (
	descCacheBytes = prometheus.NewDesc("walbus_cache_bytes",
		"Bytes of message records the entities keep in memory, all together.", nil, nil)
	descCacheBudget = prometheus.NewDesc("walbus_memory_budget_bytes",
		"The budget those records share (--memory-budget); 0: none.", nil, nil)
)

// SetCacheStats makes the entities' record caches and their budget visible
// to scrapes.
func (m *Metrics) SetCacheStats(stats func() broker.CacheStats) {
	m.reg.MustRegister(cacheCollector{stats})
}

type cacheCollector struct{ stats func() broker.CacheStats }

func (c cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descCacheBytes
	ch <- descCacheBudget
}

func (c cacheCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	ch <- prometheus.MustNewConstMetric(descCacheBytes, prometheus.GaugeValue, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(descCacheBudget, prometheus.GaugeValue, float64(s.Budget))
}
