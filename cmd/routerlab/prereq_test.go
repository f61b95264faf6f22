package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func fakeEnv(root bool, module string, have ...string) prereqEnv {
	return prereqEnv{
		root: root,
		lookPath: func(file string) (string, error) {
			for _, h := range have {
				if h == file {
					return "/usr/bin/" + file, nil
				}
			}
			return "", exec.ErrNotFound
		},
		module: func() (string, error) {
			if module == "" {
				return "", errors.New("no module")
			}
			return module, nil
		},
	}
}

func TestPrerequisitesAllThere(t *testing.T) {
	if err := checkPrerequisites(fakeEnv(true, modulePath, "ip", "nft", "curl", "dig", "danted", "go")); err != nil {
		t.Fatalf("everything is there, got %v", err)
	}
}

func TestPrerequisitesNamesEveryMissingPackage(t *testing.T) {
	err := checkPrerequisites(fakeEnv(false, ""))
	var pe *prereqError
	if !errors.As(err, &pe) {
		t.Fatalf("got %v, want a *prereqError", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"root:", "ip (Debian package iproute2)", "nft (Debian package nftables)", "curl (Debian package curl)",
		"dig (Debian package dnsutils)", "danted (Debian package dante-server)", "go, for building the router binary",
		"sudo apt-get update && sudo apt-get install -y iproute2 nftables curl dnsutils dante-server\n",
	} {
		if !strings.Contains(msg+"\n", want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
}

func TestPrerequisitesAsRootSomeMissing(t *testing.T) {
	err := checkPrerequisites(fakeEnv(true, modulePath, "ip", "nft", "curl", "go"))
	if err == nil {
		t.Fatal("dig and danted are missing, got nil")
	}
	msg := err.Error()
	if strings.Contains(msg, "root") || strings.Contains(msg, "sudo") || strings.Contains(msg, "iproute2") {
		t.Errorf("names what is there:\n%s", msg)
	}
	if !strings.HasSuffix(msg, "\n  apt-get update && apt-get install -y dnsutils dante-server") {
		t.Errorf("wrong install line:\n%s", msg)
	}
}

func TestPrerequisitesOutsideTheRepository(t *testing.T) {
	err := checkPrerequisites(fakeEnv(true, "example.com/other", "ip", "nft", "curl", "dig", "danted", "go"))
	if err == nil || !strings.Contains(err.Error(), `inside its repository (here `+"`go list -m`"+` says "example.com/other")`) {
		t.Fatalf("got %v, want the repository named", err)
	}
	if strings.Contains(err.Error(), "apt-get") {
		t.Errorf("no package is missing, yet: %v", err)
	}
}

func TestWithSbin(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/bin:/bin":                   "/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
		"/usr/sbin:/usr/bin:/sbin":        "/usr/sbin:/usr/bin:/sbin:/usr/local/sbin",
		"/usr/local/sbin:/usr/sbin:/sbin": "/usr/local/sbin:/usr/sbin:/sbin",
	} {
		sep := string(filepath.ListSeparator)
		in, want := strings.ReplaceAll(in, ":", sep), strings.ReplaceAll(want, ":", sep)
		if got := withSbin(in); got != want {
			t.Errorf("withSbin(%q) = %q, want %q", in, got, want)
		}
	}
}
