/*
 * rtnl.h: just enough rtnetlink to build a request, send it and read its acknowledgement (the
 * spawner's veth set-up, `svc-spawner.c`). One request at a time on a socket, each acknowledged
 * (NLM_F_ACK): the answer is an errno, with the kernel's own explanation when it gives one
 * (NETLINK_EXT_ACK).
 */
#ifndef SVC_RTNL_H
#define SVC_RTNL_H

#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef NETLINK_EXT_ACK
#define NETLINK_EXT_ACK 11
#endif

struct rtnl_msg {
  union {
    struct nlmsghdr h;
    unsigned char bytes[1024];
  } u;
};

/* A socket in the calling thread's network namespace (where its requests then apply). */
static int rtnl_open(void) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return -1;
  int one = 1;
  (void) setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
  return fd;
}

/* A request of `type` whose fixed header (ifinfomsg, ifaddrmsg, ...) is `fixed`. */
static void rtnl_start(struct rtnl_msg *m, uint16_t type, uint16_t flags, const void *fixed, size_t len) {
  memset(m, 0, sizeof *m);
  m->u.h.nlmsg_len = (uint32_t) NLMSG_LENGTH(len);
  m->u.h.nlmsg_type = type;
  m->u.h.nlmsg_flags = (uint16_t) (NLM_F_REQUEST | NLM_F_ACK | flags);
  memcpy(NLMSG_DATA(&m->u.h), fixed, len);
}

/* Appends an attribute; its start, for a nest to be closed by rtnl_end. Every request here is
 * small and fixed in shape: overflowing the buffer is a bug, and ends the process. */
static struct rtattr *rtnl_put(struct rtnl_msg *m, uint16_t type, const void *data, size_t len) {
  size_t at = NLMSG_ALIGN(m->u.h.nlmsg_len);
  if (at + RTA_SPACE(len) > sizeof m->u.bytes) _exit(3);
  struct rtattr *a = (struct rtattr *) (m->u.bytes + at);
  a->rta_type = type;
  a->rta_len = (unsigned short) RTA_LENGTH(len);
  if (len > 0) memcpy(RTA_DATA(a), data, len);
  m->u.h.nlmsg_len = (uint32_t) (at + RTA_ALIGN(a->rta_len));
  return a;
}

/* Appends bytes that are no attribute (the fixed header of a nested message: a veth's peer). */
static void rtnl_raw(struct rtnl_msg *m, const void *data, size_t len) {
  size_t at = NLMSG_ALIGN(m->u.h.nlmsg_len);
  if (at + NLMSG_ALIGN(len) > sizeof m->u.bytes) _exit(3);
  memcpy(m->u.bytes + at, data, len);
  m->u.h.nlmsg_len = (uint32_t) (at + NLMSG_ALIGN(len));
}

static struct rtattr *rtnl_nest(struct rtnl_msg *m, uint16_t type) {
  return rtnl_put(m, type, NULL, 0);
}

static void rtnl_end(struct rtnl_msg *m, struct rtattr *nest) {
  nest->rta_len = (unsigned short) (m->u.bytes + m->u.h.nlmsg_len - (unsigned char *) nest);
}

static void rtnl_put_str(struct rtnl_msg *m, uint16_t type, const char *s) {
  rtnl_put(m, type, s, strlen(s) + 1);
}

/*
 * Sends the request and waits for its acknowledgement: 0, or the errno the kernel answered
 * (and its extended message in `why`, if any, else an empty string).
 */
static int rtnl_talk(int fd, struct rtnl_msg *m, char *why, size_t whylen) {
  static uint32_t seq = 0;
  m->u.h.nlmsg_seq = ++seq;
  why[0] = 0;
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  ssize_t sent;
  do sent = sendto(fd, m->u.bytes, m->u.h.nlmsg_len, 0, (struct sockaddr *) &kernel, sizeof kernel);
  while (sent < 0 && errno == EINTR);
  if (sent < 0) return errno;
  union {
    struct nlmsghdr h;
    unsigned char bytes[8192];
  } reply;
  for (;;) {
    ssize_t got = recv(fd, reply.bytes, sizeof reply.bytes, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    for (struct nlmsghdr *h = &reply.h; NLMSG_OK(h, (size_t) got); h = NLMSG_NEXT(h, got)) {
      if (h->nlmsg_seq != m->u.h.nlmsg_seq || h->nlmsg_type != NLMSG_ERROR) continue;
      struct nlmsgerr *err = NLMSG_DATA(h);
      if (err->error == 0) return 0;
      /* The kernel's message follows the echoed request's header (capped: no payload). */
      if (h->nlmsg_flags & NLM_F_ACK_TLVS) {
        size_t off = NLMSG_LENGTH(sizeof *err);
        if (!(h->nlmsg_flags & NLM_F_CAPPED)) off += err->msg.nlmsg_len - NLMSG_HDRLEN;
        int left = (int) h->nlmsg_len - (int) NLMSG_ALIGN(off);
        for (struct rtattr *a = (struct rtattr *) ((unsigned char *) h + NLMSG_ALIGN(off)); RTA_OK(a, left);
             a = RTA_NEXT(a, left)) {
          if (a->rta_type == NLMSGERR_ATTR_MSG) {
            snprintf(why, whylen, "%.*s", (int) RTA_PAYLOAD(a), (const char *) RTA_DATA(a));
            break;
          }
        }
      }
      return -err->error;
    }
  }
}

#endif
