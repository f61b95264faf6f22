package main

import (
	"os"

	"github.com/agentcage/router/conf"
)

// trustedFiles are the files the Windows service reads and obeys, which an account other
// than the administrators must not be able to change (service.CheckTrusted): the config,
// its password files, the proxies' CA files, the rules' hosts files, and the approved rules
// file when the config asks and it exists (a folder shared into the VM would let the agent
// write any of them).
func trustedFiles(cfg *conf.Config) []string {
	out := []string{cfg.File}
	for _, p := range cfg.Proxies {
		if p.PasswordFile != "" {
			out = append(out, p.PasswordFile)
		}
		if p.CAFile != "" {
			out = append(out, p.CAFile)
		}
	}
	out = append(out, cfg.HostsFiles...)
	if cfg.Policy.Asks() {
		if a := cfg.Policy.ApprovedPath(cfg.File); fileExists(a) {
			out = append(out, a)
		}
	}
	return out
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
