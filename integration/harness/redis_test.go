package harness

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestRedisStartsDurable(t *testing.T) {
	r := RedisT(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	if err := c.Set(ctx, "k", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v1" {
		t.Fatalf("GET k = %q, %v", got, err)
	}
	cfg, err := c.ConfigGet(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"save": "", "appendonly": "yes", "appendfsync": "always", "protected-mode": "no", "bind": "127.0.0.1"} {
		if cfg[k] != want {
			t.Errorf("config %s = %q, want %q", k, cfg[k], want)
		}
	}

	// An acknowledged write survives SIGKILL: the append-only file is
	// fsynced on every write and reloaded on restart.
	if err := c.Set(ctx, "k", "v2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Kill()
	if err := redisPing(ctx, r.Addr()); err == nil {
		t.Fatal("PING succeeded after Kill")
	}
	if err := r.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v2" {
		t.Fatalf("GET k after crash = %q, %v; want v2", got, err)
	}

	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Dir); !os.IsNotExist(err) {
		t.Fatalf("Stop left %s behind: %v", r.Dir, err)
	}
	if err := redisPing(ctx, r.Addr()); err == nil {
		t.Fatal("PING succeeded after Stop")
	}
}

func TestRedisSettingsOverride(t *testing.T) {
	r := RedisT(t, RedisOptions{Settings: map[string]string{"appendfsync": "everysec", "maxmemory": "64mb", "port": "1"}})
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	cfg, err := c.ConfigGet(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if cfg["appendfsync"] != "everysec" || cfg["maxmemory"] != "67108864" || cfg["appendonly"] != "yes" {
		t.Fatalf("config = appendfsync %q maxmemory %q appendonly %q", cfg["appendfsync"], cfg["maxmemory"], cfg["appendonly"])
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}
