"""The pages' side of the throttles (research/ops/throttles.py): the start form and the login
page count against the same scopes as the API, and a throttled attempt is a 429 page that
says when to try again. Sign-in fails closed while the counters are down: a 503 page that
says so, with the form to try again later."""

from django.contrib.admin import AdminSite
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse

from frontend.rendering import duration_text
from research.ops.throttles import LoginThrottle, ThrottleUnavailable, page_throttle_wait


def retry_message(what: str, wait: int) -> str:
    """When to try again, as the page says durations ("in 40 min 27 s", not "in 2427
    seconds"); the 429's Retry-After header keeps the seconds."""
    return f"Too many {what}: try again in {duration_text(wait)}."


def throttled(response: HttpResponse, wait: int, status: int = 429) -> HttpResponse:
    response.status_code = status
    response["Retry-After"] = str(wait)
    return response


class LoginView(auth_views.LoginView):
    """Django's login page, with sign-in attempts throttled per address (THROTTLE_LOGIN)."""

    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        try:
            wait = page_throttle_wait(LoginThrottle, request)
        except ThrottleUnavailable as error:
            return self.refused(request, str(error.detail), error.wait, status=503)
        if wait is None:
            return super().post(request, *args, **kwargs)
        return self.refused(request, retry_message("sign-in attempts", wait), wait)

    def refused(self, request: HttpRequest, message: str, wait: int, *, status: int = 429):
        # Not checked at all: no password is tried while refused.
        form = self.form_class(request, initial={"username": request.POST.get("username", "")})
        context = self.get_context_data(form=form, throttled=message)
        return throttled(self.render_to_response(context), wait, status)


def throttle_admin_login(site: AdminSite) -> None:
    """The admin's login page counts against the same sign-in throttle as /login/."""
    login = site.login

    def throttled_login(request: HttpRequest, extra_context=None) -> HttpResponse:
        if request.method != "POST":
            return login(request, extra_context)
        try:
            wait = page_throttle_wait(LoginThrottle, request)
        except ThrottleUnavailable as error:
            return throttled(_text(str(error.detail)), error.wait, 503)
        if wait:
            return throttled(_text(retry_message("sign-in attempts", wait)), wait)
        return login(request, extra_context)

    site.login = throttled_login


def _text(message: str) -> HttpResponse:
    return HttpResponse(message, content_type="text/plain; charset=utf-8")
