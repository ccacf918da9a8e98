"""Author stand-in USD assets for Isaac Lab 3.0's ``Isaac-Pendulum-MARL-Direct`` under a local asset root.

Isaac Lab loads the task's robot and ground plane from NVIDIA's asset server; ``ISAACSIM_ASSET_ROOT`` points it at a
local folder instead. This script writes, under that folder, the two files the task's config names
(``isaaclab_assets/robots/cart_double_pendulum.py`` and ``GroundPlaneCfg``'s default ``usd_path``)::

    Isaac/IsaacLab/Robots/Classic/CartDoublePendulum/cart_double_pendulum.usd
    Isaac/IsaacLab/Environments/Grid/default_ground_plane_checker_v1/default_ground_plane.usda

The robot has the task's bodies (``slider``, ``cart``, ``pole``, ``pendulum``) and joints (``slider_to_cart``
prismatic, ``cart_to_pole`` and ``pole_to_pendulum`` revolute), but its masses and sizes are ours, not NVIDIA's: a
figure made with it is a figure of this stand-in. Its shapes are visual only (no colliders), so nothing touches the
ground plane.

Run it with an interpreter that has ``pxr`` (``usd-exchange``), e.g. ``.isaaclab-venv/bin/python
scripts/make_isaaclab_assets.py .isaaclab-assets``. Files already there are left alone unless ``--force`` is given.
"""

from __future__ import annotations

import argparse
import os

ROBOT = "Isaac/IsaacLab/Robots/Classic/CartDoublePendulum/cart_double_pendulum.usd"
GROUND = "Isaac/IsaacLab/Environments/Grid/default_ground_plane_checker_v1/default_ground_plane.usda"

RAIL_LENGTH = 8.0  # m, along x; the task resets the cart past |x| > 3
CART = {"mass": 1.0, "size": (0.4, 0.25, 0.2)}  # kg, m
POLE = {"mass": 0.25, "length": 1.0, "width": 0.05}
PENDULUM = {"mass": 0.25, "length": 1.0, "width": 0.05}


def _stage(path: str, default_prim: str):
    from pxr import Usd, UsdGeom, UsdPhysics

    os.makedirs(os.path.dirname(path), exist_ok=True)
    stage = Usd.Stage.CreateNew(path)
    UsdGeom.SetStageUpAxis(stage, UsdGeom.Tokens.z)
    UsdGeom.SetStageMetersPerUnit(stage, 1.0)
    UsdPhysics.SetStageKilogramsPerUnit(stage, 1.0)
    root = UsdGeom.Xform.Define(stage, f"/{default_prim}")
    stage.SetDefaultPrim(root.GetPrim())
    return stage, root


def _box_body(stage, path: str, *, size, mass: float, translate, color, rigid: bool = True):
    """An Xform rigid body at ``translate`` holding a visual cube scaled to ``size``, with mass and box inertia."""
    from pxr import Gf, UsdGeom, UsdPhysics

    body = UsdGeom.Xform.Define(stage, path)
    body.AddTranslateOp().Set(Gf.Vec3d(*translate))
    cube = UsdGeom.Cube.Define(stage, f"{path}/visual")
    cube.GetSizeAttr().Set(1.0)
    cube.AddScaleOp().Set(Gf.Vec3f(*size))
    cube.GetDisplayColorAttr().Set([Gf.Vec3f(*color)])
    if rigid:
        UsdPhysics.RigidBodyAPI.Apply(body.GetPrim())
        mass_api = UsdPhysics.MassAPI.Apply(body.GetPrim())
        mass_api.GetMassAttr().Set(mass)
        x, y, z = size
        mass_api.GetDiagonalInertiaAttr().Set(
            Gf.Vec3f(mass * (y * y + z * z) / 12, mass * (x * x + z * z) / 12, mass * (x * x + y * y) / 12)
        )
        mass_api.GetCenterOfMassAttr().Set(Gf.Vec3f(0.0, 0.0, 0.0))
        mass_api.GetPrincipalAxesAttr().Set(Gf.Quatf(1.0))
    return body


def _joint(stage, path: str, kind, *, body0: str | None, body1: str, axis: str, pos0, pos1, limits=None):
    from pxr import Gf, Sdf

    joint = kind.Define(stage, path)
    if body0 is not None:
        joint.CreateBody0Rel().SetTargets([Sdf.Path(body0)])
    joint.CreateBody1Rel().SetTargets([Sdf.Path(body1)])
    joint.CreateLocalPos0Attr().Set(Gf.Vec3f(*pos0))
    joint.CreateLocalPos1Attr().Set(Gf.Vec3f(*pos1))
    joint.CreateLocalRot0Attr().Set(Gf.Quatf(1.0))
    joint.CreateLocalRot1Attr().Set(Gf.Quatf(1.0))
    if axis:
        joint.CreateAxisAttr().Set(axis)
    if limits is not None:
        joint.CreateLowerLimitAttr().Set(limits[0])
        joint.CreateUpperLimitAttr().Set(limits[1])
    return joint


def write_robot(path: str) -> None:
    """The cart double pendulum: a fixed rail (``slider``), a cart sliding along x, a pole hinged on the cart and a
    pendulum hinged on the pole's tip, both about y; joint positions 0 stand both links upright."""
    from pxr import UsdGeom, UsdPhysics

    stage, root = _stage(path, "cart_double_pendulum")
    UsdPhysics.ArticulationRootAPI.Apply(root.GetPrim())
    base = "/cart_double_pendulum"
    cart_z = 0.0
    pole_z = cart_z + CART["size"][2] / 2 + POLE["length"] / 2
    pendulum_z = pole_z + POLE["length"] / 2 + PENDULUM["length"] / 2
    _box_body(
        stage, f"{base}/slider", size=(RAIL_LENGTH, 0.03, 0.03), mass=1.0, translate=(0, 0, 0), color=(0.9, 0.6, 0.2)
    )
    _box_body(
        stage, f"{base}/cart", size=CART["size"], mass=CART["mass"], translate=(0, 0, cart_z), color=(0.3, 0.5, 0.7)
    )
    _box_body(
        stage,
        f"{base}/pole",
        size=(POLE["width"], POLE["width"], POLE["length"]),
        mass=POLE["mass"],
        translate=(0, 0, pole_z),
        color=(0.1, 0.1, 0.3),
    )
    _box_body(
        stage,
        f"{base}/pendulum",
        size=(PENDULUM["width"], PENDULUM["width"], PENDULUM["length"]),
        mass=PENDULUM["mass"],
        translate=(0, 0, pendulum_z),
        color=(0.6, 0.1, 0.1),
    )
    joints = f"{base}/joints"
    UsdGeom.Scope.Define(stage, joints)
    # the rail fixed to the world: the articulation's fixed base
    _joint(
        stage,
        f"{joints}/root_joint",
        UsdPhysics.FixedJoint,
        body0=None,
        body1=f"{base}/slider",
        axis="",
        pos0=(0, 0, 0),
        pos1=(0, 0, 0),
    )
    _joint(
        stage,
        f"{joints}/slider_to_cart",
        UsdPhysics.PrismaticJoint,
        body0=f"{base}/slider",
        body1=f"{base}/cart",
        axis="X",
        pos0=(0, 0, cart_z),
        pos1=(0, 0, 0),
        limits=(-RAIL_LENGTH / 2, RAIL_LENGTH / 2),
    )
    _joint(
        stage,
        f"{joints}/cart_to_pole",
        UsdPhysics.RevoluteJoint,
        body0=f"{base}/cart",
        body1=f"{base}/pole",
        axis="Y",
        pos0=(0, 0, CART["size"][2] / 2),
        pos1=(0, 0, -POLE["length"] / 2),
    )
    _joint(
        stage,
        f"{joints}/pole_to_pendulum",
        UsdPhysics.RevoluteJoint,
        body0=f"{base}/pole",
        body1=f"{base}/pendulum",
        axis="Y",
        pos0=(0, 0, POLE["length"] / 2),
        pos1=(0, 0, -PENDULUM["length"] / 2),
    )
    stage.GetRootLayer().Save()


def write_ground(path: str) -> None:
    """A ground plane laid out as Isaac Lab's spawner expects: default prim ``/World``, a collision ``Plane`` under
    ``/World/GroundPlane`` and a visual quad at ``/World/Environment/Geometry`` (``Environment`` carries the scale the
    spawner sets from ``GroundPlaneCfg.size``)."""
    from pxr import Gf, Sdf, UsdGeom, UsdPhysics, Vt

    stage, _ = _stage(path, "World")
    plane = UsdGeom.Plane.Define(stage, "/World/GroundPlane/CollisionPlane")
    plane.GetAxisAttr().Set(UsdGeom.Tokens.z)
    plane.CreatePurposeAttr().Set(UsdGeom.Tokens.guide)
    plane.MakeInvisible()
    UsdPhysics.CollisionAPI.Apply(plane.GetPrim())
    environment = UsdGeom.Xform.Define(stage, "/World/Environment")
    environment.AddScaleOp().Set(Gf.Vec3f(1.0, 1.0, 1.0))
    mesh = UsdGeom.Mesh.Define(stage, "/World/Environment/Geometry")
    mesh.GetPointsAttr().Set(Vt.Vec3fArray([(-50, -50, 0), (50, -50, 0), (50, 50, 0), (-50, 50, 0)]))
    mesh.GetFaceVertexCountsAttr().Set([4])
    mesh.GetFaceVertexIndicesAttr().Set([0, 1, 2, 3])
    mesh.GetDisplayColorAttr().Set([Gf.Vec3f(0.5, 0.5, 0.5)])
    st = UsdGeom.PrimvarsAPI(mesh).CreatePrimvar("st", Sdf.ValueTypeNames.TexCoord2fArray, UsdGeom.Tokens.vertex)
    st.Set(Vt.Vec2fArray([(0, 0), (1, 0), (1, 1), (0, 1)]))  # the spawner rescales these with the plane
    stage.GetRootLayer().Save()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", help="the asset root (what ISAACSIM_ASSET_ROOT will point to)")
    parser.add_argument("--force", action="store_true", help="rewrite files already there")
    args = parser.parse_args(argv)
    for relative, write in ((ROBOT, write_robot), (GROUND, write_ground)):
        path = os.path.join(os.path.abspath(args.root), relative)
        if os.path.exists(path) and not args.force:
            print(f"kept {path}")
            continue
        if os.path.exists(path):
            os.remove(path)
        write(path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
