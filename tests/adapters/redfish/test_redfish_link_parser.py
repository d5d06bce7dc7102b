"""The Redfish client's one URL parser (``urls.py``, used by ``origin.py``): links that URL parsers could read in
more than one way are refused, whatever origin they seem to name, and the URL requested for any other link
is built from the ``--fabric`` URL's own scheme and authority, so that what ``requests`` would contact is
always the service's origin. Tables of the known parser-differential forms, then properties over arbitrary
strings (hypothesis): whatever a reply writes, the host and port requests would connect to are the
service's, or the link is refused."""

from __future__ import annotations

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st
from requests.adapters import HTTPAdapter

from webhook.adapters.redfish import urls
from webhook.adapters.redfish.origin import ForeignLink, Origin, foreign_link, origin_of, resolve

BASE = "http://fabric:8000/prefix"
ORIGIN = Origin("http", "fabric", 8000)
FOREIGN = "not on the service's origin http://fabric:8000"

REFUSED = [
    # urllib.parse reads everything before the last '@' as userinfo and the host after it; urllib3 ends the
    # authority at the backslash and connects to what precedes it. The bypass this module exists for.
    (r"http://other:9000\@fabric:8000/x", urls.BACKSLASH),
    (r"http://other:9000\\@fabric:8000/x", urls.BACKSLASH),
    (r"http://other\@fabric:8000/x", urls.BACKSLASH),
    (r"HTTP://other:9000\@FABRIC:8000/redfish/v1/Systems?page=2", urls.BACKSLASH),
    # WHATWG URL treats a backslash as '/' in http(s) URLs: these are scheme-relative links to a browser-like
    # parser (or a proxy that implements it), relative paths to urllib.parse.
    (r"\\other:9000/x", urls.BACKSLASH), (r"/\other:9000/x", urls.BACKSLASH), (r"\/other:9000/x", urls.BACKSLASH),
    (r"http:\\other:9000\x", urls.BACKSLASH), (r"http://fabric:8000/x\y", urls.BACKSLASH),
    # Userinfo: parsers disagree on which '@' ends it, and it carries credentials we never take from a reply.
    ("http://other:9000@fabric:8000/x", urls.USERINFO), ("http://fabric:8000@other:9000/x", urls.USERINFO),
    ("http://a@b@fabric:8000/x", urls.USERINFO), ("//user:pw@fabric:8000/x", urls.USERINFO),
    ("http://fabric%2F@other:9000/x", urls.USERINFO),
    # WHATWG URL (and urllib.parse since 3.11) delete tabs and newlines anywhere and trim leading C0 and spaces;
    # urllib3 percent-encodes them instead; header injection needs them too.
    ("http://fab\tric:8000/x", urls.UNPRINTABLE), ("http://fabric:8000/x\r\nHost: other", urls.UNPRINTABLE),
    (" http://fabric:8000/x", urls.UNPRINTABLE), ("\x00http://other:9000/", urls.UNPRINTABLE),
    ("/x y", urls.UNPRINTABLE), ("/x\x7f", urls.UNPRINTABLE), ("/x\u00a0", urls.UNPRINTABLE),
    ("/x\u2028", urls.UNPRINTABLE), ("http://fab\u200bric:8000/", urls.UNPRINTABLE),
    # RFC 3986 reads "http:host" and "http:/host" as paths; WHATWG URL, for http(s), reads a host there.
    ("http:other:9000/x", urls.NO_SLASHES), ("http:/other:9000/x", urls.NO_SLASHES),
    ("HTTP:fabric:8000/x", urls.NO_SLASHES), ("https:fabric/x", urls.NO_SLASHES),
    # Other schemes are never followed, whatever they name.
    ("file:///etc/passwd", urls.NOT_HTTP), ("javascript:alert(1)", urls.NOT_HTTP),
    ("ftp://fabric:8000/", urls.NOT_HTTP), ("https+unix://fabric/x", urls.NOT_HTTP), ("data:,x", urls.NOT_HTTP),
    ("a:b", urls.NOT_HTTP),
    # An empty host: WHATWG URL skips any number of slashes after an http(s) scheme and reads "other".
    ("http:///other:9000/x", urls.EMPTY_HOST), ("///other:9000/x", urls.EMPTY_HOST),
    ("http://:8000/x", urls.EMPTY_HOST), ("//", urls.EMPTY_HOST),
    # Hosts that some parsers decode or map first: percent-encoding, IDNA's mapping of fullwidth letters and
    # ideographic dots to ASCII, Unicode names, IPv6 zone ids (decoded by urllib3, kept by urllib.parse).
    ("http://%66abric:8000/x", urls.BAD_HOST), ("http://fabric%2eother:8000/x", urls.BAD_HOST),
    ("http://fabric%00.other/x", urls.BAD_HOST), ("http://\uff46\uff41\uff42\uff52\uff49\uff43:8000/x", urls.BAD_HOST),
    ("http://fabric\u3002other/x", urls.BAD_HOST), ("http://bücher.example/x", urls.BAD_HOST),
    ("http://fabric\uff1a8000/x", urls.BAD_HOST), ("http://[::1%25eth0]:8000/x", urls.BAD_HOST),
    ("http://[fe80::1%eth0]/x", urls.BAD_HOST), ("http://[::1/x", urls.BAD_HOST), ("http://[::1]x/", urls.BAD_HOST),
    ("http://[not:an:address]/x", urls.BAD_HOST), ("http://.fabric:8000/x", urls.BAD_HOST),
    ("http://fabric,other:8000/x", urls.BAD_HOST),
    # Ports that int() accepts and a URL parser may not, or that wrap around in some parsers.
    ("http://fabric:\uff18\uff10\uff10\uff10/x", urls.BAD_PORT), ("http://fabric:+8000/x", urls.BAD_PORT),
    ("http://fabric:0x1f40/x", urls.BAD_PORT), ("http://fabric:73536/x", urls.BAD_PORT),
    ("http://fabric:0/x", urls.BAD_PORT), ("http://fabric:008000/x", urls.BAD_PORT),
    ("http://fabric:8000:9000/x", urls.BAD_PORT),
    # Too long to be a Redfish URI: refused before any parser spends time on it.
    ("/" + "a" * urls.MAX_LINK, urls.TOO_LONG),
    # Well-formed, and elsewhere: another host, port or scheme (https is never downgraded, nor upgraded).
    ("http://other:9000/x", FOREIGN), ("//other:8000/x", FOREIGN), ("https://fabric:8000/x", FOREIGN),
    ("http://fabric/x", FOREIGN), ("http://fabric:/x", FOREIGN), ("http://fabric.:8000/x", FOREIGN),
    ("http://127.0.0.1:8000/x", FOREIGN), ("http://fabric.other:8000/x", FOREIGN),
    ("http://other:9000?@fabric:8000/x", FOREIGN), ("http://other:9000#@fabric:8000/x", FOREIGN),
]


@pytest.mark.parametrize("link, problem", REFUSED)
def test_a_link_that_parsers_could_read_differently_is_refused_naming_the_rule(link: str, problem: str) -> None:
    with pytest.raises(ForeignLink) as refused:
        resolve(BASE, ORIGIN, link, "a test")
    assert problem in str(refused.value) and "[trust]" in str(refused.value)
    assert refused.value.link == link and "http://fabric:8000" in str(refused.value)
    assert all(c.isprintable() for c in str(refused.value))  # a control character cannot forge a log line
    assert foreign_link({"Members": [{"@odata.id": "/ok"}, {"@odata.id": link}]}, ORIGIN, "a test") is not None


ACCEPTED = [
    ("/redfish/v1/Systems", "http://fabric:8000/prefix/redfish/v1/Systems"),
    ("http://FABRIC:8000/redfish/v1/Systems?$skip=2", "http://fabric:8000/redfish/v1/Systems?$skip=2"),
    ("HTTP://fabric:8000/x", "http://fabric:8000/x"),
    ("//fabric:8000/x", "http://fabric:8000/x"),
    ("http://fabric:8000", "http://fabric:8000/"), ("http://fabric:8000?x=1", "http://fabric:8000/?x=1"),
    ("http://fabric:08000/x", "http://fabric:8000/x"),
    ("http://fabric:8000/x/@other:9000/y", "http://fabric:8000/x/@other:9000/y"),  # '@' in a path is a path
    ("/x?next=http://other:9000/y", "http://fabric:8000/prefix/x?next=http://other:9000/y"),
    ("/x//other:9000/y", "http://fabric:8000/prefix/x//other:9000/y"),
    ("/redfish/v1/Systems#http://other:9000", "http://fabric:8000/prefix/redfish/v1/Systems"),  # never sent
    ("Tasks/1", "http://fabric:8000/prefix/Tasks/1"), ("../../elsewhere", "http://fabric:8000/elsewhere"),
    ("1:2", "http://fabric:8000/prefix/1:2"),
    # Encoded dots and slashes stay encoded: the service decodes them, within its own origin.
    ("/x/%2e%2e/%2F/y", "http://fabric:8000/prefix/x/%2e%2e/%2F/y"),
    ("/Systems/ünï", "http://fabric:8000/prefix/Systems/%C3%BCn%C3%AF"), ("/50%", "http://fabric:8000/prefix/50%25"),
    ('/x"<>{}|^`', "http://fabric:8000/prefix/x%22%3C%3E%7B%7D%7C%5E%60"),
    ("\uff0f\uff0fother:9000/x", "http://fabric:8000/prefix/%EF%BC%8F%EF%BC%8Fother:9000/x"),  # fullwidth '/' is text
]


@pytest.mark.parametrize("link, url", ACCEPTED)
def test_a_link_on_the_origin_is_requested_with_the_fabric_urls_own_authority(link: str, url: str) -> None:
    assert resolve(BASE, ORIGIN, link, "a test") == url
    assert contacted(url) == ("http", "fabric", 8000)


@pytest.mark.parametrize("base, link, url", [
    ("https://[FD00::1]:8443", "https://[fd00::1]:8443/x", "https://[FD00::1]:8443/x"),
    ("https://bmc.example", "https://BMC.example:443/x?y", "https://bmc.example/x?y"),
    ("https://bmc.example:443/", "//bmc.example/x", "https://bmc.example:443/x"),
])
def test_default_ports_case_and_ipv6_literals_compare_as_one_origin(base: str, link: str, url: str) -> None:
    origin = origin_of(base)
    assert origin is not None
    assert resolve(base.rstrip("/"), origin, link, "a test") == url


@pytest.mark.parametrize("url", [r"http://other:9000\@fabric:8000", "http://fab\tric:8000", "http://[::1%25lo]:80",
                                 "http://fabric:\uff18\uff10\uff10\uff10", "http://%66abric", "http:fabric"])
def test_a_fabric_url_that_parsers_could_read_differently_has_no_origin(url: str) -> None:
    assert origin_of(url) is None


def contacted(url: str) -> tuple[str, str, int]:
    """The scheme, host and port ``requests`` would open a connection to for ``url``: the prepared URL (which
    requests re-parses with urllib3) and the connection pool its adapter picks for it."""
    prepared = requests.Request("GET", url).prepare()
    pool = ADAPTER.get_connection_with_tls_context(prepared, verify=True)
    scheme = pool.scheme or ""
    return scheme, pool.host, int(pool.port or urls.DEFAULT_PORTS[scheme])


ADAPTER = HTTPAdapter()
PIECES = ["/", "\\", "@", ":", "?", "#", "%", "%2e", "%2f", "%40", "%5c", "[", "]", ".", "..", "\t", "\n", " ",
          "\x00", "\uff46", "\u3002", "\uff1a", "\uff18", "ü", "\u200b", "x", "redfish/v1", "//", "http://"]
HOSTS = ["fabric", "FABRIC", "other", "127.0.0.1", "[::1]", ":8000", ":9000", ":", "@", "\\", ".", "%2e", "%66",
         "\uff46", "\uff1a\uff18\uff10\uff10\uff10", "[", "]", "%25lo"]
SCHEMES = ["http://", "https://", "HTTP://", "//", "///", "http:", "http:/", "http:\\", "\\\\", "/\\", "/", ""]
# Mostly links shaped like URLs (a scheme, an authority of host pieces, a path of pieces), so that many are
# accepted and the property says something; then arbitrary text.
LINKS = st.one_of(
    st.tuples(st.sampled_from(SCHEMES),
              st.one_of(st.sampled_from(["fabric:8000", "FABRIC:8000", "fabric:08000"]),
                        st.lists(st.sampled_from(HOSTS), max_size=4).map("".join)),
              st.lists(st.sampled_from(PIECES), max_size=5).map("".join)).map("".join),
    st.text(alphabet=st.sampled_from(list("\\/@:?#[]%.-_fabric8o0th")), max_size=40),
    st.text(max_size=40))


@settings(max_examples=800, deadline=None)
@given(LINKS)
def test_whatever_a_reply_names_requests_would_contact_the_fabric_or_the_link_is_refused(link: str) -> None:
    try:
        url = resolve(BASE, ORIGIN, link, "a property")
    except ForeignLink:
        return
    assert contacted(url) == ("http", "fabric", 8000), (link, url)
    assert url.isascii() and url.isprintable(), url  # nothing left for a later parser to decode or strip


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["http://", "//", "HTTP://"]), st.sampled_from(["other:9000", "other", "127.0.0.1:9000"]),
       st.sampled_from(["\\", "\\\\", "/\\", "\\/", "%5c", "\t\\", "\\\n"]), st.sampled_from(["@", "@@", ""]),
       st.sampled_from(["fabric:8000", "FABRIC:8000", "fabric"]), st.sampled_from(["/x", "", "?p=2", "#f"]))
def test_the_backslash_forms_never_reach_another_host(scheme: str, other: str, slash: str, at: str, fabric: str,
                                                      rest: str) -> None:
    link = f"{scheme}{other}{slash}{at}{fabric}{rest}"
    try:
        url = resolve(BASE, ORIGIN, link, "a property")
    except ForeignLink as refused:
        assert refused.link == link
        return
    assert contacted(url) == ("http", "fabric", 8000), (link, url)
