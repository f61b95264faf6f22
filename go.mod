module github.com/agentcage/router

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/Microsoft/go-winio v0.6.4
	github.com/google/nftables v0.3.0
	github.com/google/uuid v1.6.0
	github.com/jsimonetti/rtnetlink/v2 v2.3.0
	github.com/lysShub/divert-go v0.0.0-20250418062248-28e4462def61
	github.com/mdlayher/netlink v1.9.0
	github.com/miekg/dns v1.1.73
	github.com/prometheus/client_golang v1.25.0
	github.com/tailscale/wf v0.0.0-20240214030419-6fbb0a674ee6
	github.com/things-go/go-socks5 v0.1.0
	golang.org/x/net v0.59.0
	golang.org/x/sys v0.50.0
	golang.zx2c4.com/wireguard/windows v1.1.1
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/mdlayher/socket v0.5.1 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	go4.org/netipx v0.0.0-20220725152314-7e7bdc8411bf // indirect
	golang.org/x/exp/typeparams v0.0.0-20220218215828-6cf2b201936e // indirect
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/tools v0.50.0 // indirect
	golang.org/x/tools/go/expect v0.1.1-deprecated // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	honnef.co/go/tools v0.3.2 // indirect
)
