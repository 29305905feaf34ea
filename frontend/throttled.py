"""The pages' side of the throttles (research/ops/throttles.py): the start form and the login
page count against the same scopes as the API, and a throttled attempt is a 429 page that
says when to try again."""

from django.contrib.admin import AdminSite
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse

from research.ops.throttles import LoginThrottle, page_throttle_wait


def retry_message(what: str, wait: int) -> str:
    unit = "second" if wait == 1 else "seconds"
    return f"Too many {what}: try again in {wait} {unit}."


def throttled(response: HttpResponse, wait: int) -> HttpResponse:
    response.status_code = 429
    response["Retry-After"] = str(wait)
    return response


class LoginView(auth_views.LoginView):
    """Django's login page, with sign-in attempts throttled per address (THROTTLE_LOGIN)."""

    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        wait = page_throttle_wait(LoginThrottle, request)
        if wait is None:
            return super().post(request, *args, **kwargs)
        # Not checked at all: no password is tried while throttled.
        form = self.form_class(request, initial={"username": request.POST.get("username", "")})
        context = self.get_context_data(
            form=form, throttled=retry_message("sign-in attempts", wait)
        )
        return throttled(self.render_to_response(context), wait)


def throttle_admin_login(site: AdminSite) -> None:
    """The admin's login page counts against the same sign-in throttle as /login/."""
    login = site.login

    def throttled_login(request: HttpRequest, extra_context=None) -> HttpResponse:
        if request.method == "POST" and (wait := page_throttle_wait(LoginThrottle, request)):
            response = HttpResponse(
                retry_message("sign-in attempts", wait), content_type="text/plain; charset=utf-8"
            )
            return throttled(response, wait)
        return login(request, extra_context)

    site.login = throttled_login
